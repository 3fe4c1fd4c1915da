"""The runtime's options, without torch: the choices of device, precision, memory format,
graph and data path, and their check (:mod:`pipi.runtime` resolves them on this machine and
re-exports these; ``pipi train --help`` imports only this, issue 39)."""

from __future__ import annotations

import re

from pipi.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
SWITCHES = ("auto", "true", "false")
GRAPHS = ("off", "on")
DATA_PATHS = ("host", "device")
#: Profiles that are recipes the paper states: there ``precision=auto`` is fp32 (paper:
#: no mixed precision); mixed precision only when asked (``precision=bf16|fp16``).
PAPER_PROFILES = ("paper",)


def check_runtime(*, device: str, precision: str, channels_last: str, compile: bool,
                  deterministic: bool, graph: str = "off", data_path: str = "host") -> None:
    """Refuse a malformed option with one line naming it (availability is checked later)."""
    if not (isinstance(device, str) and (device in DEVICES or re.fullmatch(r"cuda:\d+", device))):
        raise ConfigError(f"device={device!r}; use one of {list(DEVICES)} (or cuda:N)")
    if precision not in PRECISIONS:
        raise ConfigError(f"precision={precision!r}; use one of {list(PRECISIONS)}")
    if channels_last not in SWITCHES:
        raise ConfigError(f"channels_last={channels_last!r}; use one of {list(SWITCHES)}")
    for name, value in (("compile", compile), ("deterministic", deterministic)):
        if not isinstance(value, bool):
            raise ConfigError(f"{name}={value!r}: must be true or false")
    if graph not in GRAPHS:
        raise ConfigError(f"graph={graph!r}; use one of {list(GRAPHS)}")
    if data_path not in DATA_PATHS:
        raise ConfigError(f"data_path={data_path!r}; use one of {list(DATA_PATHS)}")
    if graph == "on" and compile:
        raise ConfigError("graph=on with compile=true: choose one (graph=on captures the "
                          "eager step; compile=true compiles the model)")
    if graph == "on" and precision == "fp16":
        raise ConfigError("graph=on with precision=fp16: the fp16 loss scaler is not "
                          "captured; use precision=bf16 or fp32 (or graph=off)")


def auto_or_count(value, name: str, auto: str) -> int | None:
    """An option that is ``auto`` (or empty: ``None``) or a whole number of at least 1;
    anything else is refused in one line naming the option and what ``auto`` means."""
    text = "" if value is None else str(value).strip().lower()
    if text in ("", "auto"):
        return None
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"{name}={value!r}: use auto ({auto}) or an integer >= 1")
    return n
