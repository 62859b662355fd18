"""Keep secrets out of everything a run writes: saved configs, W&B, logs, error messages.

Secrets reach a run three ways: the environment (`OPENAI_API_KEY`, read by name), URLs with
credentials (`http://user:KEY@host/v1` in `propositionizer.base_url`) and config values under a
secret-looking key (`...api_key: ...`, `...token: ...`). `redact_text` replaces all three
(plus well-known token shapes such as `sk-...`) with `***`; `redact_config` does it for a
config tree; `RedactSecrets` is a Hydra callback (`conf/hydra/default.yaml`) that rewrites the
job's `.hydra/{config,hydra,overrides}.yaml` (and a sweep's `multirun.yaml`), scrubs `sys.argv`
(W&B records it) and installs `RedactingFilter` on every logging handler. The config object
the job receives keeps the real values: only what is written down is redacted.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from densex.utils.io import atomic_open

MASK = "***"
# config keys / env names whose values are secrets (`api_key_env` holds a *name*: not matched)
_SECRET_NAME = re.compile(
    r"(?i)(?:^|[._-])(?:api[_-]?key|apikey|access[_-]?key|secret[_-]?key|private[_-]?key|"
    r"secret|token|password|passwd|credentials?|auth)$"
)
_ENV_SECRET = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)$")
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/@'\"]+)@")
_TOKEN_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{12,}|sk-ant-[A-Za-z0-9_-]{12,}|hf_[A-Za-z0-9]{20,}|"
    r"gh[pousr]_[A-Za-z0-9]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})"
)
_BEARER = re.compile(r"(?i)\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}")
# `key: value`, `key=value`, `"key": "value"` with a secret-looking key
_KEY_VALUE = re.compile(
    r"(?P<key>[\"']?[\w.-]*(?:api[_-]?key|apikey|access[_-]?key|secret|token|password|passwd|"
    r"credentials?)[\"']?)(?P<sep>\s*[:=]\s*)(?P<value>\"[^\"\n]*\"|'[^'\n]*'|[^\s,}\]\n]+)",
    re.IGNORECASE,
)
_MIN_SECRET_LEN = 8


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables named like secrets (`*_API_KEY`, `*_TOKEN`, ...), at
    least 8 characters long, longest first."""
    env = os.environ if environ is None else environ
    values = {
        v for k, v in env.items() if _ENV_SECRET.search(k.upper()) and len(v) >= _MIN_SECRET_LEN
    }
    return sorted(values, key=len, reverse=True)


def _mask_key_value(m: re.Match) -> str:
    key, value = m["key"], m["value"]
    if "env" in key.lower().rsplit("_", 1)[-1] or value.lower() in ("null", "none", "''", '""'):
        return m.group(0)  # `api_key_env: OPENAI_API_KEY` names a variable; null is no secret
    quote = value[0] if value[:1] in "\"'" else ""
    return f"{key}{m['sep']}{quote}{MASK}{quote}"


def redact_text(text: str, extra: Iterable[str] = ()) -> str:
    """`text` with URL credentials, secret-named values, token shapes, the values of secret
    environment variables and the `extra` strings replaced by `***`."""
    if not text:
        return text
    out = text
    for value in (*secret_values(), *(e for e in extra if e and len(e) >= 4)):
        if value in out:
            out = out.replace(value, MASK)
    out = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", out)
    out = _TOKEN_SHAPES.sub(MASK, out)
    out = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", out)
    out = _KEY_VALUE.sub(_mask_key_value, out)
    return out


def redact_config(obj: Any) -> Any:
    """A plain copy of a config tree (dicts, lists, OmegaConf nodes) with every value under a
    secret-looking key masked and every string passed through `redact_text`."""
    try:
        # config-import: redacts whatever it is given, a W&B / Lightning config node included
        from omegaconf import OmegaConf

        if OmegaConf.is_config(obj):
            obj = OmegaConf.to_container(obj, resolve=False)
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        pass
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            secret = isinstance(k, str) and _SECRET_NAME.search(k) and not k.endswith("_env")
            out[k] = MASK if secret and v not in (None, "") else redact_config(v)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_config(v) for v in obj)
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


class RedactingFilter(logging.Filter):
    """A handler filter that redacts each record's message and traceback (`redact_text`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: leave it to the handler
            return True
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


_FILTER = RedactingFilter()


def install_log_redaction() -> None:
    """Add `RedactingFilter` to every handler of the root logger and of named loggers."""
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    for lg in loggers:
        for handler in lg.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)


def redact_file(path: str | os.PathLike) -> bool:
    """Rewrite a text file with `redact_text` applied (atomically); True when it changed."""

    p = Path(path)
    if not p.is_file():
        return False
    text = p.read_text(encoding="utf-8", errors="replace")
    clean = redact_text(text)
    if clean == text:
        return False
    with atomic_open(p) as f:
        f.write(clean)
    return True


try:
    # config-import: `RedactSecrets` is a Hydra callback (it rewrites the job's .hydra files)
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover - hydra is a dependency
    _HydraCallback = object  # type: ignore[assignment,misc]


class RedactSecrets(_HydraCallback):
    """Hydra callback: redact the configs Hydra saved, `sys.argv` and all logging output."""

    def _scrub(self, directory: Path, names: Iterable[str]) -> None:
        for name in names:
            redact_file(directory / name)

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        self._scrub_process()

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        self._scrub_process()

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        self._scrub_process()
        hydra = config.hydra
        if hydra.output_subdir is not None:
            self._scrub(
                Path(hydra.runtime.output_dir) / str(hydra.output_subdir),
                ("config.yaml", "hydra.yaml", "overrides.yaml"),
            )

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        self._scrub(Path(str(config.hydra.sweep.dir)), ("multirun.yaml",))

    def on_job_end(self, config: Any, job_return: Any = None, **kwargs: Any) -> None:
        # a sweep's multirun.yaml is written after on_multirun_start: scrub it as jobs end
        try:
            if config.hydra.mode is not None and str(config.hydra.mode) == "RunMode.MULTIRUN":
                self._scrub(Path(str(config.hydra.sweep.dir)), ("multirun.yaml",))
        except Exception:  # noqa: BLE001 - best effort; on_multirun_end scrubs it again
            pass

    @staticmethod
    def _scrub_process() -> None:
        sys.argv[:] = [redact_text(a) for a in sys.argv]
        install_log_redaction()
