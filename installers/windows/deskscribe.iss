; Inno Setup script for the PyInstaller bundle: per user by default (no admin rights, in
; %LOCALAPPDATA%\Programs), or for all users in Program Files when run as administrator
; ({autopf} and HKA follow the install mode).
;   iscc /DFlavour=cpu  /DVersion=0.1.0 installers\windows\deskscribe.iss
;   iscc /DFlavour=cuda /DVersion=0.1.0 installers\windows\deskscribe.iss   (bundle built with .[cuda])
;   iscc /DFlavour=directml ...                                               (bundle built with .[directml])
;   add /DWithStarter=1 to offer the offline starter models (build.ps1 -WithStarter)
; Expects the bundle in build\dist\deskscribe (installers\windows\build.ps1 makes it).
; The uninstaller removes the program and its PATH entry; models, sessions and the library in
; the user's data folder stay unless the user ticks "also delete ..." (never asked, so kept,
; in a silent uninstall).

#ifndef Version
  #define Version "0.1.0"
#endif
#ifndef Flavour
  #define Flavour "cpu"
#endif

[Setup]
; One AppId for the three flavours: installing another flavour replaces the one installed.
AppId={{6E0C7C1B-9B7B-4D5E-9C6A-2F1D2B7A0D51}
AppName=DeskScribe
AppVersion={#Version}
AppVerName=DeskScribe {#Version} ({#Flavour})
AppPublisher=DeskScribe developers
VersionInfoVersion={#Version}
DefaultDirName={autopf}\DeskScribe
DefaultGroupName=DeskScribe
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog commandline
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
CloseApplications=yes

[Components]
Name: "app"; Description: "DeskScribe"; Types: full compact custom; Flags: fixed
#ifdef WithStarter
Name: "starter"; Description: "Offline starter models (Whisper base and tiny.en, 220 MB; install them with ""deskscribe models install-starter"" or from the Models tab)"; Types: full
#endif

[Tasks]
Name: "desktopicon"; Description: "Create a desktop shortcut"; Flags: unchecked
Name: "addtopath"; Description: "Add deskscribe-cli to PATH (command line)"; Flags: unchecked

[InstallDelete]
; The previous install's libraries (another flavour's CUDA or DirectML DLLs would be loaded
; next to this one's): the bundle is replaced whole, never merged.
Type: filesandordirs; Name: "{app}\_internal"
Type: filesandordirs; Name: "{app}\starter"

[Files]
Source: "..\..\build\dist\deskscribe\*"; DestDir: "{app}"; Components: app; Flags: ignoreversion recursesubdirs createallsubdirs
#ifdef WithStarter
Source: "..\..\build\dist\deskscribe-starter\*"; DestDir: "{app}\starter"; Components: starter; Flags: ignoreversion recursesubdirs createallsubdirs
#endif

[Icons]
Name: "{group}\DeskScribe"; Filename: "{app}\DeskScribe.exe"
Name: "{group}\Uninstall DeskScribe"; Filename: "{uninstallexe}"
Name: "{autodesktop}\DeskScribe"; Filename: "{app}\DeskScribe.exe"; Tasks: desktopicon

[Registry]
; HKA is HKCU for a per-user install and HKLM for an all-users one; the Environment key differs.
Root: HKCU; Subkey: "Environment"; ValueType: expandsz; ValueName: "Path"; ValueData: "{olddata};{app}"; Tasks: addtopath; Check: (not IsAdminInstallMode) and NeedsAddPath(ExpandConstant('{app}'))
Root: HKLM; Subkey: "SYSTEM\CurrentControlSet\Control\Session Manager\Environment"; ValueType: expandsz; ValueName: "Path"; ValueData: "{olddata};{app}"; Tasks: addtopath; Check: IsAdminInstallMode and NeedsAddPath(ExpandConstant('{app}'))

[Run]
Filename: "{app}\DeskScribe.exe"; Description: "Start DeskScribe"; Flags: nowait postinstall skipifsilent

[Code]
var
  DeleteData: Boolean;

function EnvRoot(): Integer;
begin
  if IsAdminInstallMode then Result := HKLM else Result := HKCU;
end;

function EnvKey(): string;
begin
  if IsAdminInstallMode then
    Result := 'SYSTEM\CurrentControlSet\Control\Session Manager\Environment'
  else
    Result := 'Environment';
end;

function NeedsAddPath(Dir: string): Boolean;
var
  Path: string;
begin
  if not RegQueryStringValue(EnvRoot(), EnvKey(), 'Path', Path) then
    Path := '';
  Result := Pos(';' + Uppercase(Dir) + ';', ';' + Uppercase(Path) + ';') = 0;
end;

procedure RemoveFromPath(Dir: string);
var
  Path, Rest, Part, Kept: string;
  Cut: Integer;
begin
  if not RegQueryStringValue(EnvRoot(), EnvKey(), 'Path', Path) then
    exit;
  Rest := Path + ';';
  Kept := '';
  while Rest <> '' do
  begin
    Cut := Pos(';', Rest);
    Part := Copy(Rest, 1, Cut - 1);
    Rest := Copy(Rest, Cut + 1, Length(Rest));
    if (Part <> '') and (CompareText(RemoveBackslashUnlessRoot(Part), RemoveBackslashUnlessRoot(Dir)) <> 0) then
    begin
      if Kept <> '' then Kept := Kept + ';';
      Kept := Kept + Part;
    end;
  end;
  if Kept <> Path then
    RegWriteExpandStringValue(EnvRoot(), EnvKey(), 'Path', Kept);
end;

function InitializeUninstall(): Boolean;
begin
  // A silent uninstall (/SILENT, /VERYSILENT) never asks and never deletes the user's data.
  if UninstallSilent then
    DeleteData := False
  else
    DeleteData := MsgBox('Also delete your transcripts, recordings and downloaded models?' + #13#10 +
      '(They are kept if you answer No.)', mbConfirmation, MB_YESNO or MB_DEFBUTTON2) = IDYES;
  Result := True;
end;

procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);
begin
  if CurUninstallStep = usUninstall then
    RemoveFromPath(ExpandConstant('{app}'));
  // The data folder is per user (%LOCALAPPDATA%\DeskScribe of whoever uninstalls).
  if (CurUninstallStep = usPostUninstall) and DeleteData then
    DelTree(ExpandConstant('{localappdata}\DeskScribe'), True, True, True);
end;
