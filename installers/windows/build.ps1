# Build the Windows bundle and installer (run on Windows with Python 3.10+ and Inno Setup 6).
#   powershell -File installers\windows\build.ps1 -Flavour cpu|cuda|directml
param([ValidateSet("cpu", "cuda", "directml")][string]$Flavour = "cpu")
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..\..")
python -m venv build\venv-$Flavour
& build\venv-$Flavour\Scripts\python -m pip install --upgrade pip
& build\venv-$Flavour\Scripts\python -m pip install ".[$Flavour]" "pyinstaller>=6.5" pillow
# The .ico is made from the app's PNG icon.
& build\venv-$Flavour\Scripts\python -c "from PIL import Image; Image.open('src/deskscribe/assets/icon.png').save('installers/windows/deskscribe.ico', sizes=[(16,16),(32,32),(48,48),(256,256)])"
& build\venv-$Flavour\Scripts\python -m PyInstaller --noconfirm --distpath build\dist --workpath build\pyinstaller installers\pyinstaller\deskscribe.spec
& build\dist\deskscribe\deskscribe-cli.exe --self-test
$version = & build\venv-$Flavour\Scripts\python -c "import deskscribe; print(deskscribe.__version__)"
& iscc "/DFlavour=$Flavour" "/DVersion=$version" installers\windows\deskscribe.iss
