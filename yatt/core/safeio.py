"""Writing outputs safely: never through a link, never half-written, checked before work.

Why: yatt writes into directories other people may write to (a shared `out/`, a run
directory on a network disk). A link planted at an output name, or at its temporary name,
must not make yatt overwrite the file it points to; a crash must not leave half a file
under the real name; and an unwritable output must be found before minutes of work, not
after. Every writer in yatt goes through this module:

- `atomic_write(path)` creates a fresh temporary file in the target's directory with
  O_CREAT|O_EXCL|O_NOFOLLOW (it cannot already exist, as a link or anything else), and on
  success renames it over the target with `os.replace`, which replaces a link at the
  target instead of writing through it. The directory is opened once and both steps are
  relative to it, so swapping the directory for a link midway does not redirect them.
- `ensure_dir(path, root)` creates directories below `root` and refuses a link among
  them (`root` itself, the user's `--out`, may be a link the user chose).
- `check_out_dir` / `check_out_file` prove, before any work, that an output can be
  written (a probe file is created and removed), and that an output is not an input.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterable, Iterator, Optional

from .errors import InputError

if TYPE_CHECKING:
    from .limits import Knob

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_TMP_NAME = 80   # characters of the target's name kept in a temporary name (NAME_MAX is 255)


def _open_dir(d: Path) -> int:
    return os.open(d, os.O_RDONLY | _DIRECTORY | _CLOEXEC)


def _create_temp(dfd: int, name: str) -> tuple[int, str]:
    """A new, unique file in the directory `dfd`: (fd, its name). O_EXCL|O_NOFOLLOW: a name
    that exists in any form, a dangling link included, is never opened."""
    for _ in range(16):
        tmp = f".{name[:_TMP_NAME]}.{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666,
                         dir_fd=dfd)
        except FileExistsError:
            continue
        return fd, tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name", name)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, fsync: bool = False,
                 encoding: Optional[str] = "utf-8", newline: Optional[str] = None) -> Iterator[IO[Any]]:
    """Open `path` for writing as a new temporary file; on a clean exit it replaces `path`
    (atomically), on an exception it is removed and `path` is left as it was."""
    if "w" not in mode or "+" in mode:
        raise ValueError(f"atomic_write: mode {mode!r}; allowed: 'w' or 'wb'")
    path = Path(path)
    dfd = _open_dir(path.parent)
    try:
        fd, tmp = _create_temp(dfd, path.name)
        try:
            if "b" in mode:
                f = os.fdopen(fd, mode)
            else:
                f = os.fdopen(fd, mode, encoding=encoding, newline=newline)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=dfd)
            raise
        try:
            with f:
                yield f
                f.flush()
                if fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        if fsync:
            with contextlib.suppress(OSError):   # some filesystems refuse a directory fsync
                os.fsync(dfd)
    finally:
        os.close(dfd)


def read_at_most(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of `path`, or its first `limit` + 1 when it is larger (the caller refuses
    it): read in blocks, so a huge or endless file costs no more than `limit`."""
    chunks, total = [], 0
    with open(path, "rb") as f:
        while total <= limit:
            block = f.read(min(1 << 20, limit + 1 - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
    return b"".join(chunks)


def read_text_at_most(path: str | os.PathLike, knob: Optional["Knob"] = None, field: str = "") -> str:
    """A small input file's UTF-8 text (a config, a model's config.json, a template), read
    in blocks up to `knob`'s cap (default YATT_CONFIG_MAX_BYTES); missing, unreadable, too
    large or not UTF-8 is an InputError naming the file (and `field`)."""
    from .limits import CONFIG_MAX_BYTES

    knob = knob or CONFIG_MAX_BYTES
    path = Path(path)
    try:
        if not path.exists():
            raise InputError("no such file", field=field, file=str(path))
        if not path.is_file():
            raise InputError("not a file", field=field, file=str(path))
        cap = knob.value()
        raw = read_at_most(path, cap)   # never more than the cap: a huge file is refused unread
    except OSError as e:  # permissions, a name too long, ...
        raise InputError(f"cannot read: {_why(e)}", field=field, file=str(path)) from None
    if len(raw) > cap:
        raise InputError(f"larger than {cap:,} bytes; allowed: a smaller file, or "
                         f"{knob.raise_hint()}", field=field, file=str(path))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"not a UTF-8 text file (byte {e.start})", field=field,
                         file=str(path)) from None


def copy_file(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Copy `src` (an input: links followed) to `dst` through `atomic_write`, so the copy
    never lands behind a link planted at `dst`."""
    import shutil

    with open(src, "rb") as fin, atomic_write(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
    return Path(dst)


def write_text(path: str | os.PathLike, text: str, *, fsync: bool = False) -> Path:
    with atomic_write(path, "w", fsync=fsync) as f:
        f.write(text)
    return Path(path)


def write_bytes(path: str | os.PathLike, data: bytes, *, fsync: bool = False) -> Path:
    with atomic_write(path, "wb", fsync=fsync) as f:
        f.write(data)
    return Path(path)


def is_link(path: str | os.PathLike) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def ensure_dir(path: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """Create `path` (and its parents) as real directories; refuse a link at or below
    `root` (default: `path`'s parent), so nothing yatt puts there lands elsewhere."""
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise ValueError(f"ensure_dir: {path} is not under {root}") from None
    root.mkdir(parents=True, exist_ok=True)
    cur = root
    for part in rel.parts:
        cur = cur / part
        try:
            os.mkdir(cur)
        except FileExistsError:
            st = os.lstat(cur)
            if stat.S_ISLNK(st.st_mode):
                raise InputError("is a link; allowed: a real directory (yatt never writes "
                                 "through links)", file=str(cur)) from None
            if not stat.S_ISDIR(st.st_mode):
                raise InputError("exists and is not a directory", file=str(cur)) from None
    return path


def _why(e: OSError) -> str:
    return e.strerror or type(e).__name__


def _probe(d: Path) -> None:
    """Create and remove a temporary file in `d` (OSError when that cannot be done)."""
    dfd = _open_dir(d)
    try:
        fd, tmp = _create_temp(dfd, "yatt-probe")
        os.close(fd)
        os.unlink(tmp, dir_fd=dfd)
    finally:
        os.close(dfd)


def check_out_dir(path: str | os.PathLike, field: str = "--out", create: bool = True) -> Path:
    """Create the output directory if needed and prove a file can be written in it, before
    any work; an InputError naming `field` otherwise (a file, /dev/null, /proc, a
    read-only disk, no permission). `create=False` creates nothing: a missing directory is
    proven creatable by probing its nearest existing parent (for a check made before
    later checks that may still refuse the input)."""
    path = Path(path)
    try:
        if path.exists() and not path.is_dir():
            raise InputError("exists and is not a directory; allowed: a directory yatt may "
                             "write in", field=field, file=str(path))
        if create:
            path.mkdir(parents=True, exist_ok=True)
            _probe(path)
        else:
            probe = path
            while not probe.exists():
                if probe.parent == probe:
                    break
                probe = probe.parent
            if not probe.is_dir():
                raise InputError(f"{str(probe)!r} is not a directory; allowed: a directory yatt "
                                 "may write in", field=field, file=str(path))
            _probe(probe)
    except OSError as e:
        raise InputError(f"cannot write there ({_why(e)}); allowed: a directory yatt may write in",
                         field=field, file=str(path)) from None
    return path


def check_new_dir(path: str | os.PathLike, field: str = "-o") -> Path:
    """An output directory yatt writes whole (aside, then renamed into place): not a link,
    not a file, absent or empty, and its parent (created if needed) writable; checked
    before work."""
    path = Path(path)
    if is_link(path):
        raise InputError("is a link; allowed: a new directory (yatt never writes through "
                         "links)", field=field, file=str(path))
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise InputError("exists and is not an empty directory; allowed: a new directory",
                         field=field, file=str(path))
    try:
        check_out_dir(path.parent, field=field)
    except InputError as e:   # named as the user wrote it, not as its parent
        raise InputError(e.message, field=field, file=str(path)) from None
    return path


def new_private_dir(parent: str | os.PathLike, name: str) -> Path:
    """A fresh directory in `parent` that no one else can write in (mode 0700, a unique
    name made with O_EXCL semantics): files a library writes by path land there, never
    behind a link someone planted. `publish_dir` moves it into place."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f".{name[:_TMP_NAME]}.", suffix=".partial", dir=parent))


def publish_dir(tmp: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Rename the finished private directory `tmp` to `path` (absent, or an empty real
    directory), with the permissions a new directory gets (the umask's)."""
    tmp, path = Path(tmp), Path(path)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)
    if path.is_dir() and not path.is_symlink():
        path.rmdir()   # empty, as check_new_dir found it (a full one: OSError, nothing lost)
    os.replace(tmp, path)   # onto a link or a file: ENOTDIR, nothing lost
    return path


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file (through links and `..`), existing or not."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def check_out_file(path: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (),
                   field: str = "--out") -> Path:
    """An output file path that can be written and is none of `inputs`; checked before work."""
    path = Path(path)
    for i in inputs:
        if same_file(path, i):
            raise InputError(f"is also an input ({i}); allowed: an output path that is not an "
                             "input", field=field, file=str(path))
    if path.is_dir():
        raise InputError("is a directory; allowed: a file path", field=field, file=str(path))
    if not path.parent.is_dir():
        raise InputError(f"directory {str(path.parent)!r} does not exist; allowed: a file in an "
                         "existing directory", field=field, file=str(path))
    try:
        _probe(path.parent)
    except OSError as e:
        raise InputError(f"cannot write there ({_why(e)}); allowed: a file in a directory yatt "
                         "may write in", field=field, file=str(path)) from None
    return path


def check_not_inputs(out_dir: str | os.PathLike, names: Iterable[str],
                     inputs: Iterable[str | os.PathLike], field: str = "--out") -> None:
    """Refuse an output directory where one of the files yatt will write is an input."""
    ins = list(inputs)
    for n in names:
        for i in ins:
            if same_file(Path(out_dir) / n, i):
                raise InputError(f"would overwrite the input {i} with its {n}; allowed: an "
                                 "output directory that holds none of the inputs", field=field,
                                 file=str(out_dir))
