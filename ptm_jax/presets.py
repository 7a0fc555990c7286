"""Presets: the TOML files in ``configs/`` (or any ``.toml`` path), read with their ``extends`` chain merged in.

``config.load_config`` turns the merged tables into the typed ``RunConfig``; this module only finds and reads
files, and every failure is a ConfigError naming the file (and line) and what to do.
"""
from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

import tomllib

from ptm_jax.errors import ConfigError


def configs_dir() -> Path:
    """The presets folder: $PTM_CONFIGS, else ``configs/`` beside the package (editable installs)."""
    env = os.environ.get("PTM_CONFIGS")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "configs"


def list_presets() -> list[str]:
    return sorted(p.stem for p in configs_dir().glob("*.toml"))


def preset_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix == ".toml" and p.exists():
        return p
    candidate = configs_dir() / f"{name_or_path}.toml"
    if candidate.exists():
        return candidate
    close = difflib.get_close_matches(name_or_path, list_presets(), n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ConfigError(
        f"unknown preset '{name_or_path}': no file {p} and no {candidate}.{hint} "
        f"Available presets: {', '.join(list_presets()) or '(none)'}."
    )


def read_toml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A preset's tables with its ``extends`` chain merged in (the base first). Every failure is a ConfigError
    naming the file (and its 1-based line where there is one): unreadable, not UTF-8, not TOML, nested too
    deeply, ``extends`` not a preset name or path, or a chain that cycles or passes 16 files."""
    if os.path.realpath(path) in map(os.path.realpath, seen):
        raise ConfigError(f"{path}: 'extends' forms a cycle: {' -> '.join(map(str, seen + (path,)))}; remove "
                          "one of the 'extends' keys")
    if len(seen) >= 16:
        raise ConfigError(f"{path}: 'extends' chain of more than 16 presets ({' -> '.join(map(str, seen))}); "
                          "merge some of them")
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # newlines as read_text() has them
        data = tomllib.loads(text)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the preset ({e.strerror or e}); pass a readable .toml file") from None
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text ({e.reason} at byte {e.start}); save the preset as "
                          "UTF-8") from None
    except tomllib.TOMLDecodeError as e:  # tomllib's message names the line: "(at line N, column M)"
        raise ConfigError(f"{path}: not valid TOML: {e}; fix the preset") from None
    except (ValueError, RecursionError) as e:  # a >4300-digit integer; arrays/tables nested past the stack
        raise ConfigError(f"{path}: not usable TOML ({type(e).__name__}: {str(e)[:80]}); fix the preset") from None
    base = data.pop("extends", None)
    if base is None:
        return data
    line = next((n for n, t in enumerate(text.split("\n"), 1)
                 if "=" in t and t.split("=", 1)[0].strip().strip("\"'") == "extends"), 0)
    where = f"{path}:{line}" if line else str(path)
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{where}: extends = {base!r:.80} ({type(base).__name__}); 'extends' takes the name of "
                          f"a preset ({', '.join(list_presets()) or 'none found'}) or the path of a .toml file, "
                          "as a string")
    try:
        base_path = preset_path(base)
    except ConfigError as e:
        raise ConfigError(f"{where}: extends: {e}") from None
    except OSError as e:  # e.g. a name longer than the file system allows
        raise ConfigError(f"{where}: extends = {base!r:.80} is not a usable preset name or path ({e.strerror}); "
                          f"use one of {', '.join(list_presets()) or 'the presets'} or a .toml path") from None
    merged = read_toml(base_path, seen + (path,))
    _deep_update(merged, data)
    return merged


def _deep_update(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _deep_update(dst[k], v)
        else:
            dst[k] = v
