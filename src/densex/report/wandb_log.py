"""Weights & Biases logging for evaluate jobs and sweep tables, driven by `logger=wandb`.

The `logger/wandb.yaml` group config (a Lightning `WandbLogger` spec) is the single source of
the project/entity/group/tags/offline settings; evaluation has no Lightning trainer, so we pass
the same settings to `wandb.init` directly. `logger=none` (or `csv`) means no W&B at all, and
without a login W&B runs offline (or is disabled by WANDB_MODE), so it never needs an account.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from densex.report.naming import labelled
from densex.utils.secrets import redact_config, redact_text


def wandb_logged_in() -> bool:
    """Whether W&B has an API key (WANDB_API_KEY or `wandb login`'s netrc entry)."""
    import wandb

    try:
        return bool(os.environ.get("WANDB_API_KEY") or wandb.api.api_key)
    except Exception:  # noqa: BLE001 - any failure to find a key means "not logged in"
        return False


def wandb_offline(offline: bool | None = None) -> bool:
    """Run W&B offline: when the config asks for it or nobody is logged in. (An explicit
    WANDB_MODE is the caller's to pass on; it wins over this.)"""
    return bool(offline) or not wandb_logged_in()


def init_run(
    settings: dict[str, Any] | None,
    *,
    save_dir: str | os.PathLike | None = None,
    name: str | None = None,
    job_type: str | None = None,
    config: dict[str, Any] | None = None,
):
    """Start a W&B run from the `logger.wandb` settings (plain values:
    `pipelines.edge.wandb_settings`), or return None when W&B is not selected (None).

    Offline unless the user is logged in (or the settings say `offline: true`); WANDB_MODE
    still wins, so WANDB_MODE=disabled turns it into a no-op run. The name, group and tags
    are redacted like the config: a name built from command-line overrides can carry a
    `base_url` with credentials.
    """
    if settings is None:
        return None
    import wandb

    offline = wandb_offline(settings.get("offline"))
    save_dir = str(save_dir or settings.get("save_dir") or ".")
    os.makedirs(save_dir, exist_ok=True)
    return wandb.init(
        project=settings.get("project") or "densex",
        entity=settings.get("entity"),
        group=_redacted(settings.get("group")),
        name=_redacted(name or settings.get("name")),
        tags=[redact_text(str(t)) for t in settings.get("tags") or []],
        job_type=job_type or settings.get("job_type"),
        dir=save_dir,
        mode=os.environ.get("WANDB_MODE") or ("offline" if offline else "online"),
        config=redact_config(config) if config is not None else None,  # no secret in W&B
        reinit="finish_previous",
    )


def _redacted(text: str | None) -> str | None:
    return redact_text(str(text)) if text else text


def _round(value: Any, digits: int = 2) -> Any:
    """Floats as a table shows them (15.333299999999994 -> 15.33)."""
    return round(value, digits) if isinstance(value, float) else value


def log_cell(
    run,
    row: dict[str, Any],
    samples: Sequence[dict[str, Any]] = (),
    recall_at_k: Sequence[float] = (),
    answer_recall: tuple[Sequence[int], Sequence[float]] | None = None,
) -> None:
    """Log one evaluate job: metrics (history and summary, named in the report vocabulary:
    `recall@5` as `R@5`, `naming.metric_label`), sample retrievals (table), the recall@k curve
    and the answer recall vs number of retrieved words (`(words, recall)`)."""
    import wandb

    metrics = {
        k: v
        for k, v in labelled(row).items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    run.log(metrics)
    run.summary.update(metrics)
    if samples:
        cols = list(samples[0])
        table = wandb.Table(columns=cols, data=[[str(s[c]) for c in cols] for s in samples])
        run.log({"samples": table})
    if len(recall_at_k):
        curve = wandb.Table(
            columns=["k", "recall"], data=[[k + 1, float(r)] for k, r in enumerate(recall_at_k)]
        )
        run.log({"recall_curve": wandb.plot.line(curve, "k", "recall", title="passage recall@k")})
    if answer_recall is not None and len(answer_recall[0]):
        words, recall = answer_recall
        table = wandb.Table(
            columns=["words", "recall"], data=[[int(w), float(r)] for w, r in zip(words, recall)]
        )
        title = "answer recall (%) within the first l retrieved words"
        run.log({"answer_recall_by_words": wandb.plot.line(table, "words", "recall", title=title)})


def log_table(run, key: str, table: Sequence[dict[str, Any]]) -> None:
    """Log a list of flat dict rows (e.g. Table 2) as a W&B table, in the report vocabulary
    (`naming.labelled`: the columns and labels of `table2.csv`)."""
    import wandb

    if not table:
        return
    rows = [labelled(r) for r in table]
    cols = list(rows[0])
    data = [[_round(r.get(c)) for c in cols] for r in rows]
    run.log({key: wandb.Table(columns=cols, data=data)})


def log_files(
    run, images: dict[str, Any] | None = None, csvs: dict[str, Any] | None = None
) -> None:
    """Log figures (PNG paths) as W&B images and CSV files (e.g. Table 3) as W&B tables;
    missing paths (None) are skipped."""
    import csv

    import wandb

    for key, path in (images or {}).items():
        if path is not None:
            run.log({key: wandb.Image(str(path))})
    for key, path in (csvs or {}).items():
        if path is None:
            continue
        with open(path, encoding="utf-8") as f:
            rows = list(csv.reader(f))
        if rows:
            data = [[_round(_number(v)) for v in r] for r in rows[1:]]
            run.log({key: wandb.Table(columns=rows[0], data=data)})


def _number(text: str) -> Any:
    """A CSV cell as a float when it is one, else the text."""
    try:
        return float(text)
    except ValueError:
        return text
