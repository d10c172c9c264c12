"""The cache deletes only what it wrote: entries are recognised by the root marker and their
layout; everything else in the cache root (files, folders, dot-folders, symlinks) is left alone
by ``clear``, the sweep and lookups, and ``info`` lists it as not cache entries."""
import os
import subprocess
import sys
import warnings

import pytest

from cutedsl.compiler import KernelCache
from cutedsl.compiler import cache as cache_mod

from test_cache import CONFIG, fake_kernel


def _cli(root, *args):
    env = {**os.environ, "CUTEDSL_CACHE_DIR": str(root)}
    return subprocess.run([sys.executable, "-m", "cutedsl", "cache", *args], env=env,
                          capture_output=True, text=True)


def _user_files(root):
    """A home-like directory: a secret in a dot-folder, a source tree, a symlink, a file."""
    (root / ".ssh").mkdir(parents=True)
    (root / ".ssh" / "id_rsa").write_text("k")
    (root / "project" / "src").mkdir(parents=True)
    (root / "project" / "src" / "main.py").write_text("print(1)")
    (root / "notes.txt").write_text("n")
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    (root / "link").symlink_to(outside, target_is_directory=True)
    # names that look like the cache's own
    (root / ".tmp-mine").mkdir()
    (root / ".tmp-mine" / "kernel.json").write_text("{}")
    (root / ".trash-old").mkdir()
    (root / "0123456789abcdef01234567").mkdir()                 # a key-like folder of the user
    (root / "0123456789abcdef01234567" / "thesis.tex").write_text("t")
    return outside


def _snapshot(root):
    return sorted((str(p.relative_to(root)), p.is_symlink()) for p in root.rglob("*"))


def test_clear_without_marker_removes_nothing_and_says_why(tmp_path):
    """The issue's reproducer: CUTEDSL_CACHE_DIR pointed at a home directory by mistake."""
    home = tmp_path / "home"
    _user_files(home)
    before = _snapshot(home)
    r = _cli(home, "clear")
    assert r.returncode == 1
    assert f"{home} has no CUTEDSL_CACHE marker" in r.stderr and "nothing removed" in r.stderr
    assert _snapshot(home) == before
    assert (home / ".ssh" / "id_rsa").read_text() == "k"


def test_clear_removes_entries_only(tmp_path):
    home = tmp_path / "home"
    outside = _user_files(home)
    before = _snapshot(home)
    c = KernelCache(home)
    c.put(CONFIG, fake_kernel("a"))                       # writes the marker and one entry
    c.get_or_build({"kernel": "other"}, lambda: fake_kernel("b"))
    assert (home / cache_mod.MARKER).is_file()
    info = c.info()
    assert info["entries"] == 2 and info["marked"]
    assert sorted(info["not_entries"]) == sorted(
        str(home / n) for n in (".ssh", ".tmp-mine", ".trash-old", "0123456789abcdef01234567/thesis.tex",
                                "link", "notes.txt", "project"))
    r = _cli(home, "info")
    assert "not cache entries (left untouched by clear): 7" in r.stdout and f"{home}/.ssh" in r.stdout
    r = _cli(home, "clear")
    assert r.returncode == 0, r.stderr
    assert f"removed 2 entries from {home}" in r.stdout and "left 7 paths that are not cache entries" in r.stdout
    assert _snapshot(home) == sorted(before + [(cache_mod.MARKER, False)])   # the marker stays with them
    assert (outside / "keep").read_text() == "x" and (home / "link").is_symlink()
    assert KernelCache(home).get(CONFIG) is None


def test_clear_of_an_own_cache_leaves_an_empty_directory(tmp_path):
    c = KernelCache(tmp_path)
    c.put(CONFIG, fake_kernel())
    assert cache_mod.MARKER in [p.name for p in tmp_path.iterdir()]
    assert c.clear() == cache_mod.ClearReport(1, [])
    assert list(tmp_path.iterdir()) == []
    assert c.clear() == cache_mod.ClearReport(0, [])      # nothing there: not a refusal


def test_foreign_files_inside_a_key_directory_are_kept(tmp_path):
    c = KernelCache(tmp_path)
    c.put(CONFIG, fake_kernel())
    entry = c.scan()[0][0]
    (entry.parent / "mine.txt").write_text("m")
    (entry / "extra.bin").write_bytes(b"1")              # an entry holding a foreign file is no entry
    assert c.scan() == ([], sorted([entry, entry.parent / "mine.txt"]))
    r = c.clear()
    assert r.removed == 0 and (entry / "extra.bin").exists() and (entry.parent / "mine.txt").exists()


def test_symlinked_entry_is_never_followed_or_renamed(tmp_path):
    """A symlink at an entry's path: not read as an entry, not renamed, the kernel kept in memory
    with a warning naming that entry (not the whole cache)."""
    c = KernelCache(tmp_path / "c")
    c.put(CONFIG, fake_kernel("a"))
    entry = c.scan()[0][0]
    target = tmp_path / "elsewhere"
    entry.rename(target)
    entry.symlink_to(target, target_is_directory=True)
    builds = []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        k, hit = c.get_or_build(CONFIG, lambda: builds.append(1) or fake_kernel("b"))
        k2, hit2 = c.get_or_build(CONFIG, lambda: builds.append(1) or fake_kernel("c"))
    assert (hit, hit2, len(builds), k2.ptx) == (False, True, 1, "// ptx b\n")
    msgs = [str(x.message) for x in w]
    assert len(msgs) == 1 and f"entry {entry} is taken by something the cache did not write" in msgs[0], msgs
    assert entry.is_symlink() and (target / "kernel.json").is_file()
    assert c.clear().kept == [str(entry)] and entry.is_symlink() and (target / "kernel.cubin").is_file()
    assert not any(p.name.startswith(".cutedsl-trash") for p in entry.parent.iterdir())


@pytest.mark.parametrize("level", ["entry", "key"])
def test_entry_blocked_by_a_file_is_discarded_and_rebuilt_once(tmp_path, level):
    """A file at the entry's path made every run recompile and blamed the whole directory."""
    c = KernelCache(tmp_path)
    c.put({"kernel": "unrelated"}, fake_kernel("u"))      # the root is marked
    key = cache_mod.config_key(CONFIG)
    tc = cache_mod.toolchain_hash()
    if level == "entry":
        (tmp_path / key).mkdir()
        blocker = tmp_path / key / tc
    else:
        blocker = tmp_path / key
    blocker.write_text("junk")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert c.get_or_build(CONFIG, lambda: fake_kernel("b"))[1] is False
    assert [str(x.message) for x in w] == [f"kernel cache entry {blocker} was blocked by a file; "
                                           f"discarded and rebuilt"]
    assert KernelCache(tmp_path).get_or_build(CONFIG, lambda: fake_kernel("x"))[0].ptx == "// ptx b\n"
    assert str(tmp_path) not in cache_mod._UNWRITABLE


def test_sweep_removes_only_own_stale_scratch(tmp_path):
    c = KernelCache(tmp_path)
    c.put(CONFIG, fake_kernel())
    key_dir = c.scan()[0][0].parent
    old = key_dir / ".cutedsl-tmp-killed"
    old.mkdir()
    (old / "kernel.ptx").write_text("p")
    users = key_dir / ".cutedsl-tmp-users"              # our prefix, but not our files
    users.mkdir()
    (users / "paper.pdf").write_text("p")
    for p in (old, users):
        os.utime(p, (1, 1))
    c._sweep(key_dir)
    assert not old.exists() and (users / "paper.pdf").exists()
