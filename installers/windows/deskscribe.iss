; Inno Setup script: a per-user installer (no admin rights) for the PyInstaller bundle.
;   iscc /DFlavour=cpu  /DVersion=0.1.0 installers\windows\deskscribe.iss
;   iscc /DFlavour=cuda /DVersion=0.1.0 installers\windows\deskscribe.iss   (bundle built with .[cuda])
;   iscc /DFlavour=directml ...                                               (bundle built with .[directml])
; Expects the bundle in build\dist\deskscribe (installers\windows\build.ps1 makes it).
; The uninstaller removes the program; models, sessions and the library in the user's data
; folder stay unless the user ticks "also delete my transcripts, recordings and models".

#ifndef Version
  #define Version "0.1.0"
#endif
#ifndef Flavour
  #define Flavour "cpu"
#endif

[Setup]
AppId={{6E0C7C1B-9B7B-4D5E-9C6A-2F1D2B7A0D51}
AppName=DeskScribe
AppVersion={#Version}
AppPublisher=DeskScribe developers
DefaultDirName={localappdata}\Programs\DeskScribe
DefaultGroupName=DeskScribe
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\build
OutputBaseFilename=DeskScribe-{#Version}-{#Flavour}-setup
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
UninstallDisplayIcon={app}\DeskScribe.exe
SetupIconFile=deskscribe.ico
ChangesEnvironment=yes

[Tasks]
Name: "desktopicon"; Description: "Create a desktop shortcut"; Flags: unchecked
Name: "addtopath"; Description: "Add deskscribe-cli to PATH (command line)"; Flags: unchecked

[Files]
Source: "..\..\build\dist\deskscribe\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\DeskScribe"; Filename: "{app}\DeskScribe.exe"
Name: "{group}\Uninstall DeskScribe"; Filename: "{uninstallexe}"
Name: "{userdesktop}\DeskScribe"; Filename: "{app}\DeskScribe.exe"; Tasks: desktopicon

[Registry]
Root: HKCU; Subkey: "Environment"; ValueType: expandsz; ValueName: "Path"; ValueData: "{olddata};{app}"; Tasks: addtopath; Check: NeedsAddPath(ExpandConstant('{app}'))

[Run]
Filename: "{app}\DeskScribe.exe"; Description: "Start DeskScribe"; Flags: nowait postinstall skipifsilent

[Code]
var
  DeleteData: Boolean;

function NeedsAddPath(Dir: string): Boolean;
var
  Path: string;
begin
  if not RegQueryStringValue(HKCU, 'Environment', 'Path', Path) then
    Path := '';
  Result := Pos(';' + Uppercase(Dir) + ';', ';' + Uppercase(Path) + ';') = 0;
end;

function InitializeUninstall(): Boolean;
begin
  DeleteData := MsgBox('Also delete your transcripts, recordings and downloaded models?' + #13#10 +
    '(They are kept if you answer No.)', mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES;
  Result := True;
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
begin
  if (CurUninstallStep = usPostUninstall) and DeleteData then
    DelTree(ExpandConstant('{localappdata}\DeskScribe'), True, True, True);
end;
