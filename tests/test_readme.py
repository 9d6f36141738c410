"""The README's and the docs' commands work as pasted: every command of their ```bash
blocks runs in seconds from a fresh clone's root in the venv (after the README's activation
line), in reading order (the README, then the pages of its Documentation table in its
order: a page's commands may use what an earlier one made), or its comment starts with why
it cannot here: ``# needs: root|slurm|gpu|cluster|spack|system-mpi|data`` or ``# long``
(minutes; a ``make`` target is then only checked with ``make -n``)."""

import os
import re
import shutil
import sys

import pytest
from common.launch import launch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
NEEDS = ("root", "slurm", "gpu", "cluster", "spack", "system-mpi", "data")
ACTIVATE = ". .venv/bin/activate"
# what only a cluster, root or software outside the venv provides
OUTSIDE = re.compile(r"(^|[\s;&|(])(srun|sbatch|salloc|spack|module|apt|apt-get|sudo)\s"
                     r"|\s/(scratch|lustre|gpfs|mnt|data)/")


def split_comment(line):
    """(command, comment) of one shell line: ``#`` starts a comment outside quotes."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].strip(), line[i + 1:].strip()
    return line.strip(), ""


def commands(text):
    """(command, comment) of every command in the ```bash blocks, in order; continued
    lines (a trailing backslash) joined, comment-only lines left out."""
    out, block, pending = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            block = line.strip() == "```bash"
            continue
        if not block:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.strip()[:-1].rstrip() + " "
            continue
        cmd, comment = split_comment(pending + line.lstrip() if pending else line)
        pending = ""
        if cmd:
            out.append((cmd, comment))
    return out


def marker(comment):
    """``needs: WHAT`` -> WHAT, ``long`` -> 'long', else None."""
    m = re.match(r"needs: ([\w-]+)", comment)
    if m:
        return m.group(1)
    return "long" if re.match(r"long\b", comment) else None


def pages():
    """The README, then every page its Documentation table links, in that order."""
    with open(README) as f:
        text = f.read()
    docs = re.findall(r"^\| `(docs/[\w-]+\.md)` \|", text, re.M)
    return [README] + [os.path.join(ROOT, d) for d in docs]


def readme_commands():
    out = []
    for path in pages():
        with open(path) as f:
            out += commands(f.read())
    return out


def test_every_page_is_linked_and_the_readme_short():
    linked = {os.path.basename(p) for p in pages()[1:]}
    have = set(os.listdir(os.path.join(ROOT, "docs")))
    assert linked == {n for n in have if n.endswith(".md")}, "link every docs/ page"
    with open(README) as f:
        n = len(f.read().splitlines())
    assert n <= 260, f"README.md has {n} lines: what a newcomer reads first fits in ~250"


def test_split_and_join():
    text = ("```bash\n# a comment\npython -m x --a '#1' \\\n    --b 2   # needs: root (why)\n"
            "```\n```\nnot shell\n```\n")
    assert commands(text) == [("python -m x --a '#1' --b 2", "needs: root (why)")]
    assert marker("needs: system-mpi; long") == "system-mpi" and marker("long: a build") == \
        "long" and marker("as long as") is None


def test_every_command_is_runnable_here_or_says_what_it_needs():
    cmds = readme_commands()
    assert any(c == ACTIVATE for c, _ in cmds), "the set-up must say to activate the venv"
    for cmd, comment in cmds:
        why = marker(comment)
        assert why is None or why == "long" or why in NEEDS, \
            f"unknown marker {comment!r} on: {cmd}"
        if why is None:
            assert not OUTSIDE.search(" " + cmd), \
                f"needs a cluster, root or outside data; mark it '# needs: ...': {cmd}"
            if "hpcio.datagen generate" in cmd:
                assert "--records" in cmd, f"a full-size preset; bound it: {cmd}"


def test_torch_pins_agree():
    with open(os.path.join(ROOT, "setup.py")) as f:
        pin = re.search(r'"(torch==[\d.]+)"', f.read()).group(1)
    with open(os.path.join(ROOT, "Makefile")) as f:
        assert f"TORCH = {pin}\n" in f.read()
    with open(README) as f:
        assert f"pip install {pin} --index-url" in f.read()


def test_long_make_targets_exist():
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    for cmd, comment in readme_commands():
        if marker(comment) == "long" and cmd.startswith("make "):
            p = launch([make, "-n", *cmd.split()[1:]], cwd=ROOT, timeout=60)
            assert p.returncode == 0, f"{cmd}: {p.stderr.strip()}"


def _clone(tmp_path):
    """A directory that looks like a fresh clone: the checkout's files, and .venv being
    the venv this test runs in."""
    for name in os.listdir(ROOT):
        if name not in (".git", ".venv", "data", "runs") and not name.startswith(".venv"):
            os.symlink(os.path.join(ROOT, name), tmp_path / name)
    os.symlink(sys.prefix, tmp_path / ".venv")
    return set(os.listdir(tmp_path))


def _fresh_shell_env():
    """This environment without the venv on PATH: what a new shell has before activation.
    PYTHONPATH stays (conftest.py: this checkout)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    bin_ = os.path.realpath(os.path.join(sys.prefix, "bin"))
    env["PATH"] = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep)
                                  if d and os.path.realpath(d) != bin_)
    return env


@pytest.mark.slow
def test_runnable_commands_run_as_pasted(tmp_path):
    if not os.path.exists(os.path.join(sys.prefix, "bin", "activate")):
        pytest.skip("not running in a venv: there is no .venv/bin/activate to paste")
    before = _clone(tmp_path)
    env, prelude = _fresh_shell_env(), []
    for cmd, comment in readme_commands():
        if marker(comment) is not None:
            continue
        p = launch(["bash", "-c", "; ".join(["set -e"] + prelude + [cmd])],
                           cwd=tmp_path, env=env, timeout=90)  # seconds, not minutes, on 2 busy cores
        assert p.returncode == 0, (f"{cmd}\nexited {p.returncode}:\n{p.stderr[-3000:]}")
        if cmd == ACTIVATE:
            prelude.append(cmd)
    assert prelude, "no activation line before the commands"
    made = sorted(set(os.listdir(tmp_path)) - before)
    assert made, "the commands wrote nothing"
    if shutil.which("git") and os.path.exists(os.path.join(ROOT, ".git")):
        for name in made:
            p = launch(["git", "check-ignore", "-q", f"{name}/x"], cwd=ROOT, capture=False, text=False)
            assert p.returncode == 0, f"the README's commands wrote {name}/, which git " \
                                      f"does not ignore"
