"""CI integration for users (docs/ci.md): the pre-commit hook run by pre-commit itself
(`pre-commit try-repo` on a local clone of this repository: no network — the hook is an
`unsupported_script`, so pre-commit builds no environment), the GitHub Action's check step run as
its shell would run it, and click's shell completion."""

import os
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT


def _env(tmp_path) -> dict:
    env = dict(os.environ)
    # the hook's `python3` (its shebang) is the interpreter running the tests, with weightcheck
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    for k, v in (("NAME", "t"), ("EMAIL", "t@example.invalid")):
        env[f"GIT_AUTHOR_{k}"] = env[f"GIT_COMMITTER_{k}"] = v
    env.pop("GIT_DIR", None)
    return env


def _git(*args, cwd, env):
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture
def project(tmp_path, examples_out):
    """A user's repository with a good drafter and one missing its lm_head, staged."""
    env = _env(tmp_path)
    proj = tmp_path / "project"
    (proj / "models").mkdir(parents=True)
    shutil.copytree(examples_out / "kimi-k2-drafter", proj / "models" / "good")
    from helpers import builders as check_builders

    check_builders.edit(
        examples_out / "kimi-k25-drafter", proj / "models" / "no-head", drop=["lm_head.weight"]
    )
    (proj / "README.md").write_text("a project\n")
    _git("init", "-q", cwd=proj, env=env)
    _git("add", ".", cwd=proj, env=env)
    return proj, env


def _try_repo(tmp_path, proj, env, *extra):
    clone = tmp_path / "weightcheck-clone"
    if not clone.exists():
        _git("clone", "-q", str(ROOT), str(clone), cwd=tmp_path, env=env)
        # the clone is of the last commit; the hook files as they are in this checkout
        for f in (".pre-commit-hooks.yaml", "ci/check-drafters"):
            (clone / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, clone / f)
        _git("add", ".", cwd=clone, env=env)
        _git("commit", "-q", "--allow-empty", "-m", "hook files", cwd=clone, env=env)
    cmd = [sys.executable, "-m", "pre_commit", "try-repo", str(clone), "weightcheck-check", *extra]
    return subprocess.run(cmd, cwd=proj, env=env, capture_output=True, text=True, timeout=300)


def test_the_hook_fails_on_a_broken_drafter_and_names_it(tmp_path, project):
    proj, env = project
    r = _try_repo(tmp_path, proj, env, "--all-files")
    assert r.returncode == 1, r.stdout + r.stderr
    out = r.stdout
    assert "models/no-head: WC" in out and "lm_head" in out
    assert "models/good" in out and "Found 0 error(s)" in out  # the good one checked too
    assert "README.md" not in out.split("weightcheck check (EAGLE-3 drafters)")[1].split("\n")[0]


def test_the_hook_passes_when_every_drafter_is_clean(tmp_path, project):
    proj, env = project
    shutil.rmtree(proj / "models" / "no-head")
    _git("add", "-A", ".", cwd=proj, env=env)
    r = _try_repo(tmp_path, proj, env, "--all-files")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Passed" in r.stdout


def test_the_hook_is_declared_as_documented():
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    (h,) = hooks
    assert h["id"] == "weightcheck-check" and h["language"] == "unsupported_script"
    assert (ROOT / h["entry"]).stat().st_mode & 0o111  # executable
    assert "weightcheck-check" in (ROOT / "docs" / "ci.md").read_text()


def test_the_actions_check_step_annotates_as_github_wants(tmp_path, examples_out):
    """The composite action's last step, run by bash as the runner would (action_path = here)."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    step = action["runs"]["steps"][-1]
    script = step["run"].replace("${{ github.action_path }}", str(ROOT))
    broken = tmp_path / "no-head"
    from helpers import builders as check_builders

    check_builders.edit(examples_out / "kimi-k25-drafter", broken, drop=["lm_head.weight"])
    env = _env(tmp_path)
    env.update(
        WC_PATHS=f"{broken} {examples_out / 'kimi-k2-drafter'}", WC_ENGINE="sglang", WC_TARGET=""
    )
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    errors = [ln for ln in r.stdout.splitlines() if ln.startswith("::error")]
    assert errors and all("title=WC" in ln for ln in errors)
    assert any("no-head" in ln for ln in errors)
    assert not any("kimi-k2-drafter" in ln for ln in errors)


def test_shell_completion_as_documented(tmp_path):
    env = _env(tmp_path)
    exe = shutil.which("weightcheck", path=env["PATH"])  # the console script the install made
    assert exe, "the weightcheck console script is not installed"
    env["_WEIGHTCHECK_COMPLETE"] = "bash_source"
    r = subprocess.run([exe], env=env, capture_output=True, text=True)
    assert "complete -o nosort -F" in r.stdout and "_WEIGHTCHECK_COMPLETE=bash_complete" in r.stdout
    env.update(_WEIGHTCHECK_COMPLETE="bash_complete", COMP_WORDS="weightcheck ch", COMP_CWORD="1")
    r = subprocess.run([exe], env=env, capture_output=True, text=True)
    assert "plain,check" in r.stdout
    assert "_WEIGHTCHECK_COMPLETE=bash_source weightcheck" in (ROOT / "docs" / "ci.md").read_text()
