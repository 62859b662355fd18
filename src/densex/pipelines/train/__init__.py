"""`train.py`: fine-tune a propositionizer, in this order.

`setup` (datamodule, model path, loggers, callbacks, the batch plan: effective batch 64) ->
`checkpoints.resolve_ckpt` (resume: `last` | `auto` | path) -> fit -> the best checkpoint's
weights (`checkpoints`) exported with `save_pretrained` (`run.export_model`).
"""
