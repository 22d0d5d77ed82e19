"""Host check: time the profile's host probe before a prediction and rescale the profile.

Why: `yatt plan|run|replay --profile P` (and `yatt run` with the shipped profile) predict
with seconds measured on the profiling host. This times the same probe here (a few
seconds, one thread, as `yatt profile` timed it) and hands back the profile rescaled to
this host (`yatt.planner.hostscale`) with the lines to print: the ratio, and past the
documented band that the profile was made on another host with the `yatt profile` command
that refreshes it. It needs torch (the exec install); without it, one line says the check
was skipped. `--no-host-check`, or YATT_HOST_CHECK=off in the environment (the test suite),
keeps the profile as measured: reproducible planning. `yatt replay` of a measured trace
that recorded the probe its run timed (`yatt run` records it) rescales to that run's host
instead (`check_recorded`): a replay re-simulates the recorded run, so the cost model
belongs at the speed that run had, not at this host's. A profile made on this machine since
its last boot (`machine_id`, recorded by `yatt profile`) is kept as measured while the
probe stays inside the band (`hostscale.own_drift`): the ratio is then this host's own
drift, printed, not applied.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from yatt.core.errors import InputError
from yatt.planner.hostscale import (
    HostProbe,
    HostRatios,
    drift_line,
    host_line,
    host_ratios,
    own_drift,
    ratio_text,
    rescale_profile,
    stale_line,
)
from yatt.planner.profile_io import Profile

CHECK_S = 3.0       # seconds of probing: ~200 samples, over the VM's few-second speed states
ENV = "YATT_HOST_CHECK"
ENV_VALUES = ("on", "off")


@dataclass(frozen=True)
class HostCheck:
    """The profile to predict with, and what the check found."""

    profile: Optional[Profile]
    lines: tuple[str, ...] = ()
    ratios: Optional[HostRatios] = None
    probe: Optional[HostProbe] = None
    where: str = "this host"        # the host the profile was rescaled to

    @property
    def note(self) -> str:
        """A few words for labels: how the profile was carried to `where` ('' when not)."""
        return ratio_text(self.ratios, self.where) if self.ratios is not None else ""


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
CPUINFO = Path("/proc/cpuinfo")


def machine_id() -> str:
    """A short hash of this machine's boot id and CPU model: the same between two calls on
    one machine until it reboots, different on another machine or VM; '' where the system
    does not say (not Linux), so a profile is then always treated as another host's."""
    try:
        boot = BOOT_ID.read_text().strip()
    except OSError:
        return ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in CPUINFO.read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        cpu = ""
    return hashlib.sha256(f"{boot}|{cpu}".encode()).hexdigest()[:16] if boot else ""


def enabled_by_env() -> bool:
    """Whether YATT_HOST_CHECK allows the check (unset: on)."""
    v = os.environ.get(ENV, "on").strip().lower()
    if v not in ENV_VALUES:
        raise InputError(f"got {v!r}; allowed: {'|'.join(ENV_VALUES)}", field=ENV)
    return v == "on"


def measure(seconds: float = CHECK_S) -> Optional[HostProbe]:
    """The probe's two parts on this host, medians over about `seconds`, one torch thread
    (as `yatt profile` runs it); None without torch."""
    try:
        import torch
    except (ImportError, OSError):   # not installed, or its libraries do not load here
        return None
    from . import microbench as mb

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        mb.host_probe_parts_once()   # warm-up: the first matmuls pay one-off set-up
        parts = mb.host_probe_parts(seconds)
    finally:
        torch.set_num_threads(threads)
    return HostProbe.from_parts(parts, machine_id())


def _skip(profile: Optional[Profile], line: str) -> HostCheck:
    """The profile as measured, with the one line that says why."""
    return HostCheck(profile, (line,))


def _not_rescalable(profile: Profile) -> Optional[str]:
    """Why a profile with tables cannot be rescaled by a CPU probe (None: it can)."""
    t = profile.tables
    if t.device != "cpu":
        return f"a {t.device} profile; the probe times this host's CPU"
    if t.host_probe_s <= 0:
        return "the profile recorded no host probe; `yatt profile` records one"
    return None


def check_host(profile: Optional[Profile], config: str, *, enabled: bool = True,
               seconds: float = CHECK_S) -> HostCheck:
    """Probe this host and rescale `profile` to it (see the module docstring). `config`
    names the experiment in the refresh command; `enabled` False (the caller read
    --no-host-check and `enabled_by_env`) keeps the profile as measured. Profiles without
    tables (efficiencies only) are returned as they are, with no line."""
    if profile is None or profile.tables is None:
        return HostCheck(profile)
    if not enabled:
        return _skip(profile, "host check: off; the profile's times as measured")
    why = _not_rescalable(profile)
    if why:
        return _skip(profile, f"host check: skipped ({why})")
    now = measure(seconds)
    if now is None:
        return _skip(profile, "host check: skipped (needs torch, the exec install); the "
                              "profile's times as measured")
    r = host_ratios(profile.tables, now)
    if r is None:
        return _skip(profile, "host check: skipped (the probe timed nothing)")
    if own_drift(profile.tables, now, r):
        return HostCheck(profile, (drift_line(r),), probe=now)
    lines = [host_line(r)]
    stale = stale_line(r, config, profile.tables.device)
    if stale:
        lines.append(stale)
    return HostCheck(rescale_profile(profile, r, now), tuple(lines), r, now)


def check_recorded(profile: Optional[Profile], recorded: Optional[HostProbe], *,
                   enabled: bool = True) -> Optional[HostCheck]:
    """`profile` rescaled to the host probe a measured run recorded (no timing here); None
    where there is nothing to rescale by (no probe recorded, no tables, a GPU profile, no
    probe in the profile), so the caller falls back to `check_host`."""
    if not enabled or recorded is None or profile is None or profile.tables is None:
        return None
    if _not_rescalable(profile):
        return None
    r = host_ratios(profile.tables, recorded)
    if r is None:
        return None
    if own_drift(profile.tables, recorded, r):
        return HostCheck(profile, ("host check: the trace's run and the profile were on one "
                                   "machine and boot, its probe inside the band; the profile's "
                                   "times as measured",), probe=recorded)
    where = "the run's host"
    line = (f"host check: the trace's run timed the profile's probe in {r.whole:.2f}x its "
            f"profile-time seconds; the profile is rescaled to that run's host "
            f"(interpreter x{r.interpreter:.2f}), not timed here")
    return HostCheck(rescale_profile(profile, r, recorded, where), (line,), r, recorded, where)
