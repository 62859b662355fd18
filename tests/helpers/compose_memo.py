"""Hydra's composition memoised within a test process.

The suite composes ~500 configs, each ~0.15 s of CPU, many of them the same or differing only
in values (`paths.cache_dir={tmp_path}`); a copy costs ~1 ms. `install()` wraps the
steps of Hydra's `ConfigLoaderImpl`, under `hydra.compose`, `@hydra.main`'s run and multirun
(the master config and each job's) alike, so every composition of the tests' processes goes
through them; GlobalHydra's state (initialize / clear) stays Hydra's own:

- `load_configuration`, the whole composition: the same search path, config name, overrides
  and mode again is a copy of the first result (its `hydra.runtime.cwd` the current one);
- under it, the defaults list (`create_defaults_list`, which reads every config file the
  defaults name) and the config merged from it (`_compose_config_from_defaults_list`): the
  same config name and config-group overrides again reuse the first defaults list and a copy
  of its merged config; Hydra then applies this call's value overrides (`key=value`) and
  fills in `hydra.overrides`, `hydra.runtime` and `hydra.job` as on any composition;
- under that, each YAML file of conf/: loaded once while unchanged (its path, mtime and
  size), then copied; and the repository each composition copies first shares the
  ConfigStore instead of deep-copying every structured config in it (~10 ms each time).

What a composition reads, and the keys cover:
- the config files: only compositions whose every file source is the repository's `conf/`
  are memoised, keyed by its state (the latest mtime and the number of its files and
  folders, ~1 ms to read), so an edited file is read again; one that reads another
  directory (a test's own configs, `DENSEX_CONF_DIR`, `hydra.searchpath`) is composed each
  time;
- the package sources (`pkg://`, installed files) and the structured ones: Hydra's
  ConfigStore, whose every `store()` starts a new generation (part of each key);
- the config name, the overrides (all of them, or the config-group ones for the defaults
  list), the run mode, `from_shell`, `validate_sweep_overrides`, the job name
  (`hydra.job.name`) and Hydra's version base.
A config copying environment variables (`hydra.job.env_copy`) is not memoised whole.
Interpolations (`${oc.env:...}`, `${now:...}`) stay unresolved in a composed config, so they
are resolved on each copy when read, as on a fresh one. A composition that fails is not
memoised (it fails again the next time, the same way). Each copy is the caller's own
(values, struct and readonly flags), so a test may change what it gets: what is memoised is
kept pickled and each copy unpickled from it (~1 ms for an evaluate config, against ~6 ms for
`copy.deepcopy`; one that does not pickle is kept as an object and deep-copied).
"""

from __future__ import annotations

import copy
import os
import pickle
from collections import Counter
from pathlib import Path
from typing import Any

from hydra._internal import config_loader_impl
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import CachingConfigRepository
from hydra._internal.defaults_list import DefaultsList
from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobRuntime
from hydra.plugins.config_source import ConfigResult

CONF_DIR = os.path.realpath(Path(__file__).resolve().parents[2] / "conf")

# "hit"/"miss"/"uncached": whole compositions; "defaults_hit"/"defaults_miss": defaults lists
STATS: Counter[str] = Counter()
_configs: dict[tuple, Any] = {}  # load_configuration's key -> its config
_defaults: dict[tuple, DefaultsList] = {}  # create_defaults_list's key -> its defaults list
_merged: dict[int, tuple[list, Any]] = {}  # id(a memoised defaults) -> (them, merged config)
_files: dict[tuple, ConfigResult] = {}  # (a conf/ file, its mtime and size) -> it, loaded
_generation = [0]  # ConfigStore.store calls so far


class _Kept:
    """An object that does not pickle, kept as a deep copy of itself."""

    def __init__(self, obj: Any) -> None:
        self.obj = copy.deepcopy(obj)


def _freeze(obj: Any) -> bytes | _Kept:
    """What the memo keeps of `obj`: its pickle, which nothing can change."""
    try:
        return pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return _Kept(obj)


def _thaw(kept: bytes | _Kept) -> Any:
    """A new copy of what `_freeze` kept: the caller's own."""
    return pickle.loads(kept) if isinstance(kept, bytes) else copy.deepcopy(kept.obj)


def _job_name() -> str | None:
    try:
        return str(JobRuntime().get("name"))
    except KeyError:
        return None


def _version_base() -> str:
    from hydra import version

    return str(version.getbase())


def _conf_state() -> tuple[int, int]:
    """(the latest mtime, the number of entries) of the files and folders under conf/."""
    latest, count, stack = 0, 0, [CONF_DIR]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                latest, count = max(latest, st.st_mtime_ns), count + 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return latest, count


def _in_conf(schema: str, path: str) -> bool:
    """Whether a config source is one the keys follow: the repository's conf/ (its state), a
    package's files or the ConfigStore (its generation)."""
    if schema == "file":
        return os.path.realpath(path) == CONF_DIR
    return schema in ("pkg", "structured")


def _config_key(loader, config_name, overrides, run_mode, from_shell, validate) -> tuple | None:
    sources = tuple((e.provider, e.path) for e in loader.get_search_path().get_path())
    key = (sources, config_name, tuple(overrides), run_mode, from_shell, validate,
           _job_name(), _version_base(), _generation[0], _conf_state())  # fmt: skip
    try:
        hash(key)
    except TypeError:  # an unhashable override: composed as Hydra would
        return None
    return key


def _memoisable(cfg: Any) -> bool:
    """Whether a composed config read files from the repository's `conf/` only (and copies
    no environment variables)."""
    sources = cfg.hydra.runtime.config_sources
    if not all(_in_conf(source.schema, source.path) for source in sources):
        return False
    return not cfg.hydra.job.get("env_copy")


def _is_value_override(repo, override) -> bool:
    """Hydra's own partition (`defaults_list.Overrides`): a dict value or a key that is no
    config group sets a value; sweep overrides are neither."""
    return isinstance(override.value(), dict) or not repo.group_exists(override.key_or_group)


def _defaults_key(repo, config_name, overrides_list, prepend_hydra, skip_missing):
    """The defaults list's key and this call's value overrides (None, None: not memoised)."""
    sources = tuple((s.scheme(), s.provider, s.path) for s in repo.get_sources())
    if not all(_in_conf(scheme, path) for scheme, _, path in sources):
        return None, None
    groups, values = [], []
    for override in overrides_list:
        if override.is_sweep_override():
            groups.append(override.input_line)
        elif _is_value_override(repo, override):
            values.append(override)
        else:
            groups.append(override.input_line)
    key = (sources, config_name, tuple(groups), prepend_hydra, skip_missing, _generation[0],
           _conf_state())  # fmt: skip
    return key, values


def _memoise_files(cls: type) -> None:
    """Wrap `cls.load_config` (Hydra's `FileConfigSource`: its plugin scan executes that
    module again, so the class the sources are made of is patched where found): a YAML file
    of conf/ is loaded once while unchanged (path, mtime, size), then copied."""
    load_yaml = cls.load_config
    if getattr(load_yaml, "_memoised", False):
        return

    def load_config(self, config_path):
        if os.path.realpath(self.path) != CONF_DIR:
            return load_yaml(self, config_path)
        full = os.path.realpath(os.path.join(CONF_DIR, self._normalize_file_name(config_path)))
        try:
            st = os.stat(full)
        except OSError:
            return load_yaml(self, config_path)  # Hydra's own error
        key = (full, st.st_mtime_ns, st.st_size)
        if key not in _files:
            STATS["file_miss"] += 1
            loaded = load_yaml(self, config_path)
            _files[key] = ConfigResult(config=_freeze(loaded.config), path=loaded.path,
                                       provider=loaded.provider, header=loaded.header)  # fmt: skip
        first = _files[key]
        return ConfigResult(config=_thaw(first.config), path=first.path,
                            provider=first.provider, header=dict(first.header))  # fmt: skip

    load_config._memoised = True  # type: ignore[attr-defined]
    cls.load_config = load_config


def install() -> None:
    """Wrap Hydra's composition steps and ConfigStore (once per process; not at all under
    DENSEX_TEST_COMPOSE_MEMO=0, to compare or to rule the memo out)."""
    if os.environ.get("DENSEX_TEST_COMPOSE_MEMO") == "0":
        return
    if getattr(ConfigLoaderImpl.load_configuration, "_memoised", False):
        return
    load = ConfigLoaderImpl.load_configuration
    merge = ConfigLoaderImpl._compose_config_from_defaults_list
    create_defaults_list = config_loader_impl.create_defaults_list
    store = ConfigStore.store

    def load_configuration(
        self, config_name, overrides, run_mode, from_shell=True, validate_sweep_overrides=True
    ):
        key = _config_key(
            self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides
        )
        if key is not None and key in _configs:
            STATS["hit"] += 1
            cfg = _thaw(_configs[key])
            cfg.hydra.runtime.cwd = os.getcwd()
            return cfg
        for source in self.repository.get_sources():
            if source.scheme() == "file":
                _memoise_files(type(source))
        cfg = load(self, config_name, overrides, run_mode, from_shell, validate_sweep_overrides)
        if key is not None and _memoisable(cfg):
            STATS["miss"] += 1
            _configs[key] = _freeze(cfg)
        else:
            STATS["uncached"] += 1
        return cfg

    def defaults_list(repo, config_name, overrides_list, prepend_hydra, skip_missing):
        key, values = _defaults_key(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        if key is not None and key in _defaults:
            STATS["defaults_hit"] += 1
            first = _defaults[key]
            overrides = copy.copy(first.overrides)
            overrides.config_overrides = values
            return DefaultsList(defaults=first.defaults, defaults_tree=first.defaults_tree,
                                config_overrides=values, overrides=overrides)  # fmt: skip
        made = create_defaults_list(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        if key is not None:
            STATS["defaults_miss"] += 1
            _defaults[key] = made
        return made

    def merged(self, defaults, repo):
        first = _merged.get(id(defaults))
        if first is not None and first[0] is defaults:
            return _thaw(first[1])
        cfg = merge(self, defaults, repo)
        if any(d is defaults for d in (m.defaults for m in _defaults.values())):
            _merged[id(defaults)] = (defaults, _freeze(cfg))
        return cfg

    def caching_repository(self, delegate):
        # Hydra's own, but for the ConfigStore the structured source holds: shared, not deep
        # copied (every structured config, ~10 ms a composition); the source only reads it
        config_store = ConfigStore.instance()
        self.delegate = copy.deepcopy(delegate, {id(config_store): config_store})
        self.cache = {}

    def store_config(self, *args: Any, **kwargs: Any) -> None:
        _generation[0] += 1
        return store(self, *args, **kwargs)

    load_configuration._memoised = True  # type: ignore[attr-defined]
    ConfigLoaderImpl.load_configuration = load_configuration  # type: ignore[method-assign]
    ConfigLoaderImpl._compose_config_from_defaults_list = merged  # type: ignore[method-assign]
    config_loader_impl.create_defaults_list = defaults_list
    CachingConfigRepository.__init__ = caching_repository  # type: ignore[method-assign]
    ConfigStore.store = store_config  # type: ignore[method-assign]
