"""``convert``: publishing. The output is written into a temporary folder beside OUT, verified,
then renamed into place; Ctrl-C or SIGTERM removes the temporary folder, a killed run's leftovers
are removed by the next convert into the same folder and by ``weightcheck clean`` (never those of
a process still alive). ``--force`` replaces only an OUT weightcheck wrote, or an empty folder.
Missing parent folders of OUT are made. SRC is never written to. ``--fsync`` flushes every file
and folder before OUT appears."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal

from weightcheck.commands.convert import produce
from weightcheck.commands.convert.items import Plan
from weightcheck.commands.convert.provenance import CARD_MARK, MARK
from weightcheck.errors import UsageError, WeightcheckError
from weightcheck.model.drafter import Drafter
from weightcheck.storage import verify as verify_mod
from weightcheck.storage.header import read_local_header

TMP_MARK = ".weightcheck-tmp-"


class Interrupted(Exception):
    pass


def tmp_dir(out: str, kind: str = "") -> str:
    """``.OUT.weightcheck-tmp-<pid>`` beside OUT: this run's unfinished output (kind ``""``) or,
    with kind ``"old-"``, the previous OUT set aside by ``--force`` (clean_stale knows both)."""
    parent, name = os.path.split(os.path.abspath(out))
    return os.path.join(parent, f".{name}{TMP_MARK}{kind}{os.getpid()}")


def remove(path: str) -> None:
    """Delete a file, link or folder tree, as far as it can be: what is left is a leftover the
    next run's clean_stale removes."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def pid_alive(pid_text: str) -> bool:
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, it is another user's
        return True
    return True


def _leftover(entry: str) -> tuple[str, bool, str] | None:
    """``.NAME.weightcheck-tmp-[old-]PID`` -> (NAME, set aside by --force?, PID), else None."""
    if not entry.startswith(".") or TMP_MARK not in entry:
        return None
    name, _, rest = entry[1:].rpartition(TMP_MARK)
    old = rest.startswith("old-")
    pid = rest[4:] if old else rest
    if not name or not pid.isdigit():
        return None
    return name, old, pid


def clean(folder: str) -> dict:
    """Tidy what killed converts left in ``folder``, whatever OUT they were writing (their process
    is gone; a leftover of a process still alive is never touched):

    * ``.OUT.weightcheck-tmp-<pid>``: an unfinished output — removed;
    * ``.OUT.weightcheck-tmp-old-<pid>``: a previous OUT, set aside by ``--force`` just before the
      new one was renamed in — put back as OUT if OUT is missing (the kill fell between the two
      renames), else removed.

    Returns ``{"folder", "removed": [entry, ...], "kept": [{"name", "pid"}, ...]}``."""
    removed, kept = [], []
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        entries = []
    for e in entries:
        parsed = _leftover(e)
        if parsed is None:
            continue
        name, old, pid = parsed
        path = os.path.join(folder, e)
        if pid_alive(pid):
            kept.append({"name": e, "pid": int(pid)})
            continue
        target = os.path.join(folder, name)
        if old and not os.path.lexists(target):
            os.rename(path, target)
            removed.append(f"{e} (restored as {name})")
            continue
        remove(path)
        removed.append(e)
    return {"folder": folder, "removed": removed, "kept": kept}


def clean_stale(out: str) -> list[str]:
    """Tidy the killed converts' leftovers beside OUT (:func:`clean` of OUT's folder): any later
    convert writing into a folder cleans it, whichever OUT the killed run was writing."""
    return clean(os.path.dirname(os.path.abspath(out)))["removed"]


# what convert writes into OUT, and nothing else (produce.py, plan.shard_name)
WRITTEN = re.compile(
    r"model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json|config\.json|README\.md"
)


def not_replaceable(out: str) -> str | None:
    """Why ``--force`` must not replace OUT, or None when it may: OUT is an empty folder, or a
    folder holding only what convert writes, each safetensors file carrying weightcheck's mark in
    its metadata. Anything else — a file of the user's, a subfolder, a link, a folder someone
    else wrote — is not ours to delete (cp, save_pretrained and hf download never delete what
    they did not write)."""
    if os.path.islink(out):
        return "is a symbolic link"
    if not os.path.isdir(out):
        return "is a file, not a folder weightcheck wrote"
    try:
        entries = sorted(os.listdir(out))
    except OSError as e:
        return f"cannot be listed ({e.strerror or e})"
    if not entries:
        return None
    foreign = [
        e
        for e in entries
        if not WRITTEN.fullmatch(e)
        or os.path.islink(os.path.join(out, e))
        or not os.path.isfile(os.path.join(out, e))
    ]
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        return f"holds {foreign[0]}{more}, which weightcheck did not write"
    shards = [e for e in entries if e.endswith(".safetensors")]
    if not shards:
        return "holds no safetensors file written by weightcheck"
    for e in shards:
        try:
            meta = read_local_header(os.path.join(out, e)).metadata
        except WeightcheckError:
            return f"holds {e}, which is not a safetensors file weightcheck wrote"
        if MARK not in meta:
            return f"holds {e}, which weightcheck did not write (no {MARK} in its metadata)"
    for e in entries:
        if not e.endswith(".safetensors") and not ours(os.path.join(out, e)):
            mark = "weightcheck convert's mark line" if e == "README.md" else MARK
            return f"holds {e}, which weightcheck did not write (no {mark} in it)"
    return None


def ours(path: str) -> bool:
    """Whether config.json, model.safetensors.index.json or README.md at ``path`` carries the
    mark convert writes into it (provenance.MARK, provenance.CARD_MARK): a file of the same name
    the user wrote or edited the mark out of is not replaced."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(1 << 24)
    except (OSError, UnicodeDecodeError):
        return False
    if path.endswith(".md"):
        return CARD_MARK in text
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    if isinstance(obj, dict) and path.endswith(".index.json"):
        obj = obj.get("metadata")
    return isinstance(obj, dict) and MARK in obj


def _refusal(out: str, why: str) -> UsageError:
    return UsageError(
        out,
        f"exists and {why}: refused, even with --force (it replaces only a folder weightcheck "
        "wrote, or an empty one); choose another OUT or remove it yourself",
    )


def check_paths(src: Drafter, out: str, force: bool) -> None:
    out_abs = os.path.realpath(os.path.abspath(out))
    s = src.source
    if s.kind != "hub":
        root = s.location if s.kind == "folder" else os.path.dirname(s.location)
        root = os.path.realpath(root)
        if s.kind == "folder" and (out_abs == root or os.path.commonpath([out_abs, root]) == root):
            raise UsageError(
                out,
                f"OUT is {'SRC' if out_abs == root else 'inside SRC'} ({root}): "
                "refused, the source is never written to",
            )
        # OUT must not be SRC's folder or any folder above it: --force would replace the source
        if os.path.commonpath([out_abs, root]) == out_abs:
            raise UsageError(
                out,
                f"OUT contains SRC ({s.location}): refused, replacing it would delete the source",
            )
        for f in s.files.values():
            if f.local_path and os.path.realpath(f.local_path) == out_abs:
                raise UsageError(out, "OUT is a file of SRC: refused")
    if os.path.lexists(out):
        why = not_replaceable(out)
        if why is not None:
            raise _refusal(out, why)
        if not force:
            raise UsageError(out, "exists: pass --force to replace it")
    # missing parent folders are made, as mkdir -p, save_pretrained and hf download do
    parent = os.path.dirname(os.path.abspath(out))
    while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UsageError(out, f"{parent} is not a folder")
    if not os.access(parent, os.W_OK):
        raise UsageError(out, f"cannot write in {parent} (permission denied)")


def make_parents(out: str) -> list[str]:
    """Make OUT's missing parent folders; returns those made, deepest last."""
    made = []
    parent = os.path.dirname(os.path.abspath(out))
    missing = []
    while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        missing.append(parent)
        parent = os.path.dirname(parent)
    for p in reversed(missing):
        os.mkdir(p)
        made.append(p)
    return made


def unmake(folders: list[str]) -> None:
    """Remove the parent folders :func:`make_parents` made, if still empty (a failed write leaves
    the tree as it found it)."""
    for p in reversed(folders):
        try:
            os.rmdir(p)
        except OSError:
            return


def write(plan: Plan, force: bool = False, progress=None, fsync: bool = False) -> dict:
    """Write, verify, publish. Returns a summary dict.

    ``fsync``: flush every file and folder to disk before OUT appears (survives a power loss).
    Off by default, like cp, ``save_pretrained`` and ``save_file``: OUT is complete and verified
    when it appears either way; only a crash of the machine before the kernel's own writeback
    (~30 s) could lose it then."""
    out = os.path.abspath(plan.out)
    cleaned = clean_stale(out)
    tmp = tmp_dir(out)
    made: list[str] = []
    old_handlers = {}
    state = {"publishing": False, "deferred": None, "starting": False, "held": None}

    def on_signal(signum, frame):
        if state["publishing"]:  # the renames that put OUT in place are not interrupted
            state["deferred"] = signum
            return
        if state["starting"]:  # inside Thread.start(): raised once the thread can be stopped
            state["held"] = signum
            return
        raise Interrupted(signum)

    try:
        for sig in (signal.SIGINT, signal.SIGTERM):  # inside the try: the finally restores them
            old_handlers[sig] = signal.getsignal(sig)  # before: a signal may come right after
            try:
                signal.signal(sig, on_signal)
            except ValueError:  # not the main thread
                del old_handlers[sig]
        made = make_parents(out)
        os.makedirs(tmp)  # only once the handlers are in place: a signal now removes it
        files = write_verified(plan, tmp, progress, fsync, state)
        state["publishing"] = True
        publish(tmp, out, force)
        if fsync:
            fsync_path(os.path.dirname(out))
        summary = {
            "out": out,
            "files": files,
            "tensors": len(plan.items),
            "bytes": sum(it.nbytes for it in plan.items),
            "fsync": fsync,
            "cleaned": cleaned,
        }
        if state["deferred"] is not None:
            summary["note"] = (
                f"signal {state['deferred']} arrived while OUT was being put in "
                "place; OUT is complete and verified"
            )
        return summary
    except Interrupted as e:
        shutil.rmtree(tmp, ignore_errors=True)
        unmake(made)
        raise WeightcheckError(
            plan.out, f"interrupted by signal {e.args[0]}: nothing written"
        ) from None
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        unmake(made)
        raise WeightcheckError(plan.out, f"cannot write: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        unmake(made)
        raise
    finally:
        for sig, h in old_handlers.items():
            signal.signal(sig, h)


def write_verified(plan: Plan, tmp: str, progress, fsync: bool, state: dict) -> list[str]:
    """Every file of OUT in ``tmp``: the shards (each byte range re-read as it is written, then
    each shard re-opened with the safetensors library), the index, the config and the card. The
    file names."""
    state["starting"] = True  # until the with below owns the thread, a signal is held
    checker = verify_mod.RangeChecker()
    with checker:
        state["starting"] = False
        if state["held"] is not None:
            raise Interrupted(state["held"])
        headers = produce.write_shards(plan, tmp, progress, checker, fsync)
        checker.finish()  # every byte range re-read and checked
    for shard in range(plan.shards):
        name = plan.shard_name(shard)
        verify_mod.reopen(
            os.path.join(tmp, name),
            headers[name],
            {it.out_name: (it.dtype, tuple(it.shape)) for it in plan.items if it.shard == shard},
        )
    index = produce.write_index(plan, tmp)
    meta = produce.write_config_and_card(plan, tmp)
    if fsync:  # the shards were flushed as they were closed
        for f in index + meta:
            fsync_path(os.path.join(tmp, f))
        fsync_path(tmp)
    return list(headers) + index


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp: str, out: str, force: bool) -> None:
    if os.path.lexists(out):
        why = not_replaceable(out)  # again: something may have appeared in OUT since the start
        if why is not None:
            raise _refusal(out, why)
        if not force:
            raise UsageError(out, "exists: pass --force to replace it")
        aside = tmp_dir(out, "old-")
        os.rename(out, aside)
        try:
            os.rename(tmp, out)
        except OSError:
            os.rename(aside, out)
            raise
        # the old OUT is no longer needed: rename it to a plain temporary name first (atomic), so
        # a kill while it is being deleted leaves something the next run deletes, not "restores"
        doomed = tmp_dir(out)  # free again: tmp has just become OUT
        os.rename(aside, doomed)
        remove(doomed)
    else:
        try:
            os.rename(tmp, out)
        except OSError as e:
            if os.path.lexists(out):  # another convert won the race
                raise UsageError(out, "exists (another process wrote it first)") from None
            raise e
