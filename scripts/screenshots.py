"""Every picture the README and the docs show, made from the offline network (EfficientNet-Lite0), with a manifest
that says what each was made from.

From the repository root (a few minutes a page on a CPU; it prints each picture's time):

    python scripts/screenshots.py                      # everything
    python scripts/screenshots.py --pages per_sample   # one picture (names below), the others kept

Pictures (docs/images/…):
- screenshots/<page>.png, 1280 × 800, one per app page, after the page's main action (small settings where the
  defaults would take long on a CPU): home (the explanation and the precomputed example), per_sample (a run with
  the paper's defaults, the replay slider three steps back), beta_layer (the paper's grid), compare (the page's
  default methods), evaluate (degradation curves, 9 points per curve, with the table), dataset (a folder run of three
  skimage photos, each as it is, mirrored and cropped: opened, at its gallery), dataset_concepts (the Dataset page on
  the tests' shortcut run with its concepts found: the concept atlas, the mark's concept a shortcut candidate),
  dataset_compare (that folder run compared with a run of the same photos with a red square planted at the centre),
  dataset_selftest (the self-test on those photos with the offline network, the form's defaults);
- live_run.gif (name `live_run`): the animation of the Per-Sample run above, as the page's "Animation GIF" button
  downloads it (the app's own GIF, `iba_core.render.animation.animation_gif`, not frames of the browser);
- cli/<command>.png (names `cli_attribute`, `cli_compare`, `cli_report`): what a command writes, run on skimage's
  chelsea: `attribute --png` (the overlay), `compare` (grid.png, the Compare page's default methods and the shipped
  Readout), `report` (its HTML, of the Dataset page's folder run, as Chromium shows it at 1280 × 800);
- cli/<command>.png of the commands that write no picture (names `cli_models`, `cli_stats`, `cli_evaluate`,
  `cli_train_readout`): the command line and what it prints, drawn as a terminal (at most 1280 px wide and
  TERMINAL_LINES lines), run with small settings on TERMINAL_PHOTOS (so each takes seconds on a CPU) from inside
  the temporary folder, so the paths it prints are short and relative.

PNGs are at most 300 KB (full colour when it fits, else a dithered palette), the GIF at most 2 MB.

The manifest, docs/images/manifest.json, holds per picture: its file, the commit it was made from (`git rev-parse
HEAD`, with "-dirty" when tracked files differed from it), the app's version (pyproject.toml), its size in pixels,
for an app page its title (app.py's navigation) and heading (the page's `st.title`), and a fingerprint of the code
it depends on. tests/test_screenshots.py fails when a fingerprint, a size or a title no longer matches, or when a
picture is missing.

The fingerprint rule (`sources`, `fingerprint`): a picture depends on its entry files (app.py and pages/<page>.py
for an app page and the GIF; iba_core/cli/<module>.py for a command, plus iba_core/render/report.py for the
report) and on every module of `pages/` and `iba_core/render/` those reach through their `import` statements, at
any depth and inside functions too (read with `ast`; a name that `iba_core.render` exports lazily counts as the
module that defines it). Only the code that lays a page out and draws it counts: a change in the library's logic
(iba_core/app, per_sample, …) changes numbers, not the picture's make-up, and is not followed. The fingerprint is
the sha256 of each source's path and bytes (CRLF read as LF), in path order: read from the files, not from git, so
a clean clone or an unpacked archive checks the same.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import traceback
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
MANIFEST = IMAGES / "manifest.json"
CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 800}
MAX_BYTES = 300_000
MAX_GIF_BYTES = 2_000_000
STARTUP_S = 120
RUN_MS = 600_000  # a cold CPU run (a grid of ten bottlenecks) can take minutes
#: Folders whose modules a picture's fingerprint follows through imports (see the module's docstring).
DRAWING_FOLDERS = ("pages/", "iba_core/render/")
#: The skimage photos of the Dataset page's folder run (all in the package: no download), each as it is, mirrored
#: and cropped, so the network's classes have three images each (class means and clusters to show).
FOLDER_PHOTOS = ("chelsea", "coffee", "rocket")
FOLDER_VARIANTS = ("photo", "mirrored", "crop")
#: The folder `stats` and `evaluate` read in their terminal pictures: eight skimage photos (all in the package).
TERMINAL_PHOTOS = ("astronaut", "chelsea", "coffee", "colorwheel", "hubble_deep_field", "immunohistochemistry",
                   "retina", "rocket")
TERMINAL_LINES = 40
TERMINAL_FONT_PX = 15


# ---- what a picture is made from ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Picture:
    """One picture: its name (what --pages takes), its file under docs/images, its entry files for the
    fingerprint, and the app page it shows (None for a command's picture)."""

    name: str
    file: str
    entries: tuple[str, ...]
    page: str | None = None


APP_PAGES = ("home", "per_sample", "beta_layer", "compare", "evaluate", "dataset")
PICTURES: dict[str, Picture] = {
    **{p: Picture(p, f"screenshots/{p}.png", ("app.py", f"pages/{p}.py"), page=p) for p in APP_PAGES},
    **{name: Picture(name, f"screenshots/{name}.png", ("app.py", "pages/dataset.py"), page="dataset")
       for name in ("dataset_concepts", "dataset_compare", "dataset_selftest")},
    "live_run": Picture("live_run", "live_run.gif", ("app.py", "pages/per_sample.py"), page="per_sample"),
    "cli_attribute": Picture("cli_attribute", "cli/attribute.png", ("iba_core/cli/attribute.py",)),
    "cli_compare": Picture("cli_compare", "cli/compare.png", ("iba_core/cli/compare.py",)),
    "cli_report": Picture("cli_report", "cli/report.png", ("iba_core/cli/report.py", "iba_core/render/report.py")),
    **{f"cli_{cmd}": Picture(f"cli_{cmd}", f"cli/{cmd}.png", (f"iba_core/cli/{cmd}.py",))
       for cmd in ("models", "stats", "evaluate")},
    "cli_train_readout": Picture("cli_train_readout", "cli/train-readout.png", ("iba_core/cli/readout.py",)),
}


def _module_file(root: Path, module: str) -> Path | None:
    """The file of a dotted module name inside `root` (module.py or package/__init__.py), or None."""
    base = root.joinpath(*module.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _lazy_exports(init: Path) -> dict[str, str]:
    """A package's lazily exported names (`iba_core.render`'s `_PUBLIC`: name → submodule), from its literal dicts."""
    names: dict[str, str] = {}
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            for key, sub in zip(value.keys, value.values):
                if isinstance(key, ast.Constant) and isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    names[str(key.value)] = sub.value
    return names


def _imported_files(root: Path, path: Path) -> set[Path]:
    """The files of the modules `path` imports (anywhere in it, also inside functions) that lie inside `root`."""
    package = list(path.relative_to(root).with_suffix("").parts[:-1])
    found: set[Path] = set()

    def add(module: str, name: str | None = None) -> bool:
        target = _module_file(root, f"{module}.{name}" if name else module)
        if target is None and name is not None:  # a name, not a submodule: maybe a lazy export of the package
            init = _module_file(root, module)
            if init is not None and init.name == "__init__.py":
                sub = _lazy_exports(init).get(name)
                target = _module_file(root, f"{module}.{sub}") if sub else None
        if target is not None:
            found.add(target)
        return target is not None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            resolved = [add(module, alias.name) for alias in node.names]
            if not all(resolved):  # a plain name defined in the package's __init__.py
                add(module)
    return found


def sources(entries: Iterable[str], root: Path = ROOT, folders: tuple[str, ...] = DRAWING_FOLDERS) -> list[str]:
    """The files a picture depends on (paths relative to `root`, sorted): `entries` and every module inside
    `folders` they reach through imports, at any depth."""
    seen: set[Path] = set()
    todo = [root / e for e in entries]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for target in _imported_files(root, path):
            if target.relative_to(root).as_posix().startswith(folders):
                todo.append(target)
    return sorted(p.relative_to(root).as_posix() for p in seen)


def _code(root: Path, rel: str) -> bytes:
    return (root / rel).read_bytes().replace(b"\r\n", b"\n")  # CRLF as LF: a Windows checkout agrees


def fingerprint(paths: Iterable[str], root: Path = ROOT) -> str:
    """sha256 of each file's relative path and bytes (CRLF as LF), in path order."""
    digest = hashlib.sha256()
    for rel in sorted(paths):
        digest.update(rel.encode() + b"\0" + _code(root, rel) + b"\0")
    return digest.hexdigest()


def file_digests(paths: Iterable[str], root: Path = ROOT) -> dict[str, str]:
    """Each file's own sha256 (16 hex digits, CRLF as LF): the manifest keeps them so a stale picture's test can
    name the files that changed."""
    return {rel: hashlib.sha256(_code(root, rel)).hexdigest()[:16] for rel in sorted(paths)}


def app_version(root: Path = ROOT) -> str:
    """The app's version: pyproject.toml's [project] version (iba_core has no __version__)."""
    with (root / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def commit(root: Path = ROOT) -> str:
    """`git rev-parse HEAD`, with "-dirty" when tracked files differ from it; "unknown" outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                 capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if changed else "")


def _first_call(tree: ast.AST, attr: str, match: Callable[[ast.Call], bool] = lambda c: True) -> ast.Call | None:
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == attr
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "st" and match(node)):
            return node
    return None


def page_title(page: str, root: Path = ROOT) -> str | None:
    """The page's title in app.py's navigation (`st.Page("pages/<page>.py", title=…)`), or None."""
    path = f"pages/{page}.py"
    call = _first_call(ast.parse((root / "app.py").read_text(encoding="utf-8")), "Page",
                       lambda c: bool(c.args) and isinstance(c.args[0], ast.Constant) and c.args[0].value == path)
    for keyword in call.keywords if call else ():
        if keyword.arg == "title" and isinstance(keyword.value, ast.Constant):
            return str(keyword.value.value)
    return None


def page_heading(page: str, root: Path = ROOT) -> str | None:
    """The page's heading: the text of its `st.title("…")`, or None."""
    call = _first_call(ast.parse((root / "pages" / f"{page}.py").read_text(encoding="utf-8")), "title",
                       lambda c: bool(c.args) and isinstance(c.args[0], ast.Constant))
    return str(call.args[0].value) if call else None


def read_manifest(path: Path = MANIFEST) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"pictures": {}}


def manifest_entry(picture: Picture, made_from: str, seconds: float, command: str | None = None) -> dict:
    """The manifest's record of `picture`, just written: file, provenance, size, titles, fingerprint."""
    path = IMAGES / picture.file
    with Image.open(path) as image:
        width, height = image.size
    files = sources(picture.entries)
    entry = {"file": path.relative_to(ROOT).as_posix(), "commit": made_from, "version": app_version(),
             "width": width, "height": height, "bytes": path.stat().st_size}
    if picture.page is not None:
        entry.update(page=picture.page, title=page_title(picture.page), heading=page_heading(picture.page))
    if command is not None:
        entry["command"] = command
    entry.update(fingerprint=fingerprint(files), sources=file_digests(files), seconds=round(seconds),
                 made=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return entry


# ---- the server --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cache: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """`streamlit run app.py` on a free port with its own cache folder; returns (process, url) once healthy."""
    port = free_port()
    env = {**os.environ, "IBA_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
           "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none", "--theme.base", "light"]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"streamlit did not answer within {STARTUP_S} s:\n{log.read_text()[-3000:]}")


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---- small PNGs --------------------------------------------------------------------------------------------


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def small_png(png: bytes, limit: int = MAX_BYTES) -> bytes:
    """The screenshot as a PNG of at most `limit` bytes, at full size: full colour if it fits, else a palette
    (dithered, which keeps the heatmaps' gradients) of 256, then fewer colours."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    data = _png(image)
    for colours in (256, 192, 128, 96, 64):
        if len(data) <= limit:
            break
        palette = image.quantize(colours, method=Image.Quantize.FASTOCTREE)
        data = _png(image.quantize(palette=palette, dither=Image.Dither.FLOYDSTEINBERG))
    return data


def small_gif(gif: bytes, limit: int = MAX_GIF_BYTES) -> bytes:
    """The animation as a GIF of at most `limit` bytes: as it is when it fits, else its frames scaled down (each
    frame's duration kept) until it does."""
    if len(gif) <= limit:
        return gif
    from PIL import ImageSequence

    source = Image.open(io.BytesIO(gif))
    frames = [(f.convert("RGB"), f.info.get("duration", 100)) for f in ImageSequence.Iterator(source)]
    scale = 0.9
    while True:
        size = (round(source.width * scale), round(source.height * scale))
        shrunk = [f.resize(size, Image.Resampling.LANCZOS).quantize(256, method=Image.Quantize.MEDIANCUT)
                  for f, _ in frames]
        buf = io.BytesIO()
        shrunk[0].save(buf, format="GIF", save_all=True, append_images=shrunk[1:], loop=0, optimize=True,
                       duration=[d for _, d in frames])
        if buf.tell() <= limit or scale < 0.3:
            return buf.getvalue()
        scale *= 0.85


# ---- one session of pictures --------------------------------------------------------------------------------


@dataclass
class Session:
    """What the pictures of one run of the script share: the temporary folder, the server's address and
    environment, the chosen pictures, the photos and the folder run (made once, when first needed)."""

    tmp: Path
    env: dict[str, str]
    chosen: list[str]
    made_from: str
    url: str = ""
    _run_dir: Path | None = None
    manifest: dict = field(default_factory=read_manifest)

    def photo(self, name: str) -> Path:
        """skimage.data's `name` photo as a PNG file in the temporary folder."""
        import skimage.data

        path = self.tmp / "skimage" / f"{name}.png"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(getattr(skimage.data, name)()).save(path)
        return path

    def _cli_env(self) -> dict[str, str]:
        """The session's environment with this checkout first on the path: a command run in the temporary folder
        must import this checkout's iba_core, not an installed one."""
        return {**self.env, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), self.env.get("PYTHONPATH"))))}

    def cli(self, *args: str, cwd: Path = ROOT) -> str:
        """`python -m iba_core ARGS` with the session's cache, run in `cwd`; its stdout. A failure raises with its
        output."""
        done = subprocess.run([sys.executable, "-m", "iba_core", *args], cwd=cwd, env=self._cli_env(),
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"`iba_core {shlex.join(args)}` exited with {done.returncode}:\n"
                               f"{(done.stdout + done.stderr)[-3000:]}")
        return done.stdout

    def terminal(self, *args: str) -> str:
        """`python -m iba_core ARGS` run inside the temporary folder; its stdout and stderr as a terminal shows
        them (interleaved: unbuffered), with the folder's path, should one still appear, shortened to `.`."""
        done = subprocess.run([sys.executable, "-m", "iba_core", *args], cwd=self.tmp,
                              env={**self._cli_env(), "PYTHONUNBUFFERED": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # Bytes, decoded here: text mode would turn a progress bar's carriage returns into new lines.
        output = done.stdout.decode("utf-8", errors="replace")
        if done.returncode:
            raise RuntimeError(f"`iba_core {shlex.join(args)}` exited with {done.returncode}:\n{output[-3000:]}")
        return output.replace(str(self.tmp), ".").replace(str(Path.home()), "~")

    def photo_folder(self, name: str, photos: Iterable[str]) -> Path:
        """A folder `name` in the temporary folder holding skimage.data's `photos` as PNG files."""
        folder = self.tmp / name
        folder.mkdir(exist_ok=True)
        for photo in photos:
            target = folder / f"{photo}.png"
            if not target.exists():
                target.write_bytes(self.photo(photo).read_bytes())
        return folder

    def folder_run(self) -> Path:
        """A finished folder run (the Per-Sample Bottleneck's defaults) of FOLDER_PHOTOS in FOLDER_VARIANTS."""
        if self._run_dir is None:
            folder = self.tmp / "photos_folder"
            folder.mkdir(exist_ok=True)
            for name in FOLDER_PHOTOS:
                with Image.open(self.photo(name)) as photo:
                    w, h = photo.size
                    variants = {"photo": photo.copy(), "mirrored": photo.transpose(Image.Transpose.FLIP_LEFT_RIGHT),
                                "crop": photo.crop((w // 8, h // 8, w - w // 8, h - h // 8))}
                for variant in FOLDER_VARIANTS:
                    variants[variant].save(folder / f"{name}_{variant}.png")
            start = time.monotonic()
            self.cli("attribute", folder.name, "--out", "run", "--no-progress", cwd=self.tmp)  # relative: the
            # report names its run as it was given, and the temporary folder's path must not show in the picture
            print(f"  (folder run of {len(FOLDER_PHOTOS) * len(FOLDER_VARIANTS)} photos: "
                  f"{time.monotonic() - start:.0f} s)", flush=True)
            self._run_dir = self.tmp / "run"
        return self._run_dir

    def marked_folder_run(self) -> Path:
        """A folder run like `folder_run`'s of the same files with a red square (a sixth of the shorter side) planted
        at the centre of each (a corner can fall outside the network's centre crop): the "after" of a before /
        after comparison."""
        self.folder_run()
        folder = self.tmp / "photos_marked"
        folder.mkdir(exist_ok=True)
        for path in sorted((self.tmp / "photos_folder").glob("*.png")):
            with Image.open(path) as photo:
                marked = photo.convert("RGB")
            side = min(marked.size) // 6
            left, top = (marked.width - side) // 2, (marked.height - side) // 2
            marked.paste((220, 20, 20), (left, top, left + side, top + side))
            marked.save(folder / path.name)
        self.cli("attribute", folder.name, "--out", "run_marked", "--no-progress", cwd=self.tmp)
        return self.tmp / "run_marked"

    def concept_run(self) -> Path:
        """The tests' shortcut run (tests/runs/run_fixtures.py: a tiny CNN trained in seconds to tell its class
        "marked" by a red corner mark) with its concepts found (`find_concepts`, K by the elbow rule)."""
        sys.path.insert(0, str(ROOT / "tests" / "runs"))
        from run_fixtures import load_card, make_shortcut_run

        from iba_core.concepts import find_concepts

        start = time.monotonic()
        run_dir, _ = make_shortcut_run(self.tmp / "shortcut")
        find_concepts(load_card(self.tmp / "shortcut" / "card" / "tiny.toml"), run_dir)
        print(f"  (shortcut run and its concepts: {time.monotonic() - start:.0f} s)", flush=True)
        return run_dir

    def save(self, name: str, data: bytes, seconds: float, command: str | None = None) -> None:
        """Write picture `name` and its manifest entry (the manifest at once: a later failure keeps it)."""
        picture = PICTURES[name]
        path = IMAGES / picture.file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        entry = manifest_entry(picture, self.made_from, seconds, command)
        self.manifest.setdefault("pictures", {})[name] = entry
        self.manifest["rule"] = ("fingerprint: sha256 of the entry files and of every module of pages/ and "
                                 "iba_core/render/ they import, at any depth (scripts/screenshots.py's docstring)")
        self.manifest["pictures"] = dict(sorted(self.manifest["pictures"].items()))
        MANIFEST.write_text(json.dumps(self.manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{entry['file']}: {len(data) / 1000:.0f} kB, {entry['width']}×{entry['height']}, {seconds:.0f} s",
              flush=True)


# ---- the app's pages ---------------------------------------------------------------------------------------


def wait_idle(page, extra_ms: int = 800) -> None:
    """Wait until the script run is over (no "Running…" status widget) and Plotly has drawn."""
    page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=RUN_MS)
    page.wait_for_timeout(extra_ms)


def scroll_to(page, locator, offset: int = 70) -> None:
    """Scroll the app's main area so that `locator` sits just under the top bar."""
    locator.first.scroll_into_view_if_needed()
    locator.first.evaluate(
        f"(el) => {{ const box = el.getBoundingClientRect();"
        f" const main = document.querySelector('[data-testid=\"stMain\"]') || document.scrollingElement;"
        f" main.scrollBy(0, box.top - {offset}); window.scrollBy(0, box.top - {offset}); }}")
    page.wait_for_timeout(400)


def set_number(page, label: str, value: int) -> None:
    field_ = page.get_by_role("spinbutton", name=label)
    field_.fill(str(value))
    field_.press("Tab")


def home(page, session: Session, expect) -> str:
    page.goto(session.url)
    expect(page.get_by_text("Information used")).to_be_visible()
    wait_idle(page)
    scroll_to(page, page.get_by_text("Explore", exact=True), offset=20)
    return ""


def per_sample(page, session: Session, expect) -> str:
    """A run with the paper's defaults; its GIF (the page's download) when `live_run` is chosen; the replay
    slider three steps back for the picture."""
    start = time.monotonic()
    page.goto(f"{session.url}/per_sample")
    expect(page.get_by_text("Top prediction")).to_be_visible()
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.get_by_text("Information used")).to_be_visible(timeout=RUN_MS)
    wait_idle(page)
    if "live_run" in session.chosen:
        with page.expect_download(timeout=RUN_MS) as download:
            page.get_by_role("button", name="Animation GIF").click()
        gif = small_gif(Path(download.value.path()).read_bytes())
        session.save("live_run", gif, time.monotonic() - start)
    slider = page.get_by_role("slider", name="Replay step")
    if slider.count() == 0:
        return "no replay slider on the Per-Sample page"
    slider.first.focus()
    for _ in range(3):  # back to step 7 of 10: the replay, not just the end state
        slider.first.press("ArrowLeft")
    wait_idle(page)
    scroll_to(page, page.get_by_role("heading", name=page_heading("per_sample")), offset=20)
    return ""


def beta_layer(page, session: Session, expect) -> str:
    page.goto(f"{session.url}/beta_layer")
    expect(page.get_by_text("Top prediction")).to_be_visible()
    page.get_by_role("button", name="Compute grid").click()  # the paper's settings: ten runs, ~1 min on a CPU
    expect(page.get_by_text("The grid is ready below.")).to_be_visible(timeout=RUN_MS)
    wait_idle(page, 1500)
    # From the grid's caption down: the checkbox, the lost-class warning and both rows with their colour bars.
    scroll_to(page, page.get_by_text("steps × batch"), offset=16)
    return ""


def compare(page, session: Session, expect) -> str:
    page.goto(f"{session.url}/compare")
    expect(page.get_by_text("Top prediction")).to_be_visible()
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page.get_by_role("button", name="Download grid (PNG)")).to_be_visible(timeout=RUN_MS)
    wait_idle(page)
    scroll_to(page, page.get_by_role("heading", name="Maps"))
    return ""


def evaluate(page, session: Session, expect) -> str:
    page.goto(f"{session.url}/evaluate")
    expect(page.get_by_text("Top prediction")).to_be_visible()
    set_number(page, "Points per curve", 9)
    page.get_by_role("button", name="Compute curves").click()
    expect(page.locator('[data-testid="stDataFrame"]').first).to_be_visible(timeout=RUN_MS)
    wait_idle(page, 1500)
    scroll_to(page, page.get_by_role("heading", name="Degradation (MoRF / LeRF)"))
    return ""


def dataset(page, session: Session, expect) -> str:
    """The folder run of the photos, opened by its folder, at its gallery."""
    run_dir = session.folder_run()
    page.goto(f"{session.url}/dataset")
    page.get_by_role("textbox", name="Run folder on the server").fill(str(run_dir))
    page.get_by_role("button", name="Open run").click()
    expect(page.locator(".st-key-ds_gallery img").first).to_be_attached(timeout=RUN_MS)
    wait_idle(page, 1500)
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)",
                           timeout=RUN_MS)
    # The gallery: the maps over the photos on one bits scale.
    heading = page.get_by_role("heading", name="Gallery")
    scroll_to(page, heading if heading.count() else page.locator(".st-key-ds_gallery"), offset=20)
    return ""


def dataset_concepts(page, session: Session, expect) -> str:
    """The concept atlas of the tests' shortcut run (class "marked" is told by a red corner mark only), its concepts
    found beforehand: what stands out (the mark's concept as a shortcut candidate) and the atlas below it."""
    run_dir = session.concept_run()
    page.goto(f"{session.url}/dataset")
    page.get_by_role("textbox", name="Run folder on the server").fill(str(run_dir))
    page.get_by_role("button", name="Open run").click()
    expect(page.locator(".st-key-ds_concept_highlight_0 img").first).to_be_attached(timeout=RUN_MS)
    expect(page.get_by_role("heading", name="Concepts")).to_be_visible(timeout=RUN_MS)
    wait_idle(page, 1500)
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)",
                           timeout=RUN_MS)
    scroll_to(page, page.get_by_role("heading", name="Concepts"), offset=20)
    return ""


def open_run_on_dataset_page(page, session: Session, run_dir: Path, expect) -> None:
    page.goto(f"{session.url}/dataset")
    page.get_by_role("textbox", name="Run folder on the server").fill(str(run_dir))
    page.get_by_role("button", name="Open run").click()
    expect(page.locator(".st-key-ds_gallery img").first).to_be_attached(timeout=RUN_MS)


def dataset_compare(page, session: Session, expect) -> str:
    """The photos' folder run (A) compared with a run of the same files with a red square planted at the centre (B):
    the most changed images' maps and their difference B − A on one scale."""
    marked = session.marked_folder_run()
    open_run_on_dataset_page(page, session, session.folder_run(), expect)
    page.locator(".st-key-ds_cmp_open summary").click()
    page.get_by_role("textbox", name="Run folder to compare with (B)").fill(str(marked))
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page.get_by_text("Comparing the runs image by image")).to_have_count(0, timeout=RUN_MS)
    expect(page.locator(".st-key-ds_cmp_open img").first).to_be_attached(timeout=RUN_MS)
    wait_idle(page, 1500)
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)",
                           timeout=RUN_MS)
    scroll_to(page, page.locator(".st-key-ds_cmp_open"), offset=20)
    return ""


def dataset_selftest(page, session: Session, expect) -> str:
    """The self-test on the photos with the offline network and the form's defaults (its methods and sample) but a
    patch of half the crop side: the verdict, the reaction's figures and (where the model reacts) the ranking."""
    folder = session.folder_run().parent / "photos_folder"
    page.goto(f"{session.url}/dataset")
    page.locator(".st-key-ds_st_open summary").click()
    page.get_by_role("textbox", name="Image folder on the server").fill(str(folder))
    page.get_by_role("textbox", name="Self-test folder (created if missing)").fill(str(session.tmp / "selftest"))
    set_number(page, "Size (share of the crop side)", 0.5)
    page.get_by_role("button", name="Run the self-test").click()
    expect(page.get_by_text("Self-test in ")).to_be_visible(timeout=RUN_MS)
    wait_idle(page, 1500)
    page.wait_for_function("() => Array.from(document.images).every(i => i.complete && i.naturalWidth > 0)",
                           timeout=RUN_MS)
    scroll_to(page, page.get_by_text("Self-test in "), offset=20)
    return ""


PAGE_ACTIONS: dict[str, Callable] = {"home": home, "per_sample": per_sample, "beta_layer": beta_layer,
                                     "compare": compare, "evaluate": evaluate, "dataset": dataset,
                                     "dataset_concepts": dataset_concepts, "dataset_compare": dataset_compare,
                                     "dataset_selftest": dataset_selftest}


def app_page(browser, session: Session, name: str, expect) -> None:
    """Open page `name`, do its main action and save its picture (when chosen: `live_run` alone visits the
    Per-Sample page for its GIF only)."""
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.set_default_timeout(180_000)
        expect.set_options(timeout=180_000)
        start = time.monotonic()
        note = PAGE_ACTIONS[name](page, session, expect)
        errors = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
        if errors.count():
            note = (note + "; " if note else "") + f"errors on the page: {errors.all_inner_texts()}"
        heading = page.locator("h1").first.inner_text().strip()
        if heading != page_heading(PICTURES[name].page):
            note = (note + "; " if note else "") + f"the page's heading is {heading!r}, its code says " \
                                                   f"{page_heading(PICTURES[name].page)!r}"
        if note:
            raise RuntimeError(note)
        if name in session.chosen:
            page.mouse.move(VIEWPORT["width"] - 5, VIEWPORT["height"] - 5)  # no hover tool bars in the picture
            page.wait_for_timeout(300)
            session.save(name, small_png(page.screenshot()), time.monotonic() - start)
    except Exception:
        page.screenshot(path=str(Path(tempfile.gettempdir()) / f"iba-screens-failed-{name}.png"))
        raise
    finally:
        page.close()


# ---- the commands' pictures --------------------------------------------------------------------------------


def cli_attribute(browser, session: Session) -> None:
    start = time.monotonic()
    out = session.tmp / "attribute.png"
    session.cli("attribute", str(session.photo("chelsea")), "--png", str(out))
    session.save("cli_attribute", small_png(out.read_bytes()), time.monotonic() - start,
                 "python -m iba_core attribute chelsea.png --png attribute.png")


def cli_compare(browser, session: Session) -> None:
    from iba_core.app.choices import DEFAULT_COMPARE_METHODS  # the Compare page's, so the two pictures agree

    start = time.monotonic()
    methods = ",".join((*DEFAULT_COMPARE_METHODS, "readout"))
    session.cli("compare", str(session.photo("chelsea")), "--methods", methods, "--out", str(session.tmp / "cmp"))
    session.save("cli_compare", small_png((session.tmp / "cmp" / "grid.png").read_bytes()), time.monotonic() - start,
                 f"python -m iba_core compare chelsea.png --methods {methods} --out compare")


def cli_report(browser, session: Session) -> None:
    run_dir = session.folder_run()
    start = time.monotonic()
    html = session.tmp / "report.html"
    session.cli("report", run_dir.name, "--out", html.name, cwd=session.tmp)  # relative: the report shows `run`
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(html.as_uri())
        page.wait_for_function("() => Array.from(document.images).every(i => i.complete)")
        page.wait_for_timeout(300)
        data = small_png(page.screenshot())
    finally:
        page.close()
    session.save("cli_report", data, time.monotonic() - start,
                 "python -m iba_core attribute photos_folder --out run --no-progress  (the Dataset page's folder "
                 "of photos); python -m iba_core report run --out report.html")


def terminal_lines(text: str, columns: int) -> list[str]:
    """`text` as a terminal's lines: a progress bar's carriage returns keep only its last state, colour codes
    are dropped, and lines longer than `columns` wrap (at spaces where they can, keeping the line's indent)."""
    import re
    import textwrap

    lines: list[str] = []
    for raw in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).rstrip("\n").split("\n"):
        shown = next((part for part in reversed(raw.split("\r")) if part.strip()), "").rstrip()
        indent = shown[: len(shown) - len(shown.lstrip())]
        lines += (textwrap.wrap(shown, columns, subsequent_indent=indent, break_on_hyphens=False)
                  if len(shown) > columns else [shown])
    return lines


def terminal_png(command: str, output: str) -> bytes:
    """The command line and its output drawn as a terminal (light text on a dark background, DejaVu Sans Mono):
    at most 1280 px wide (longer lines wrap) and TERMINAL_LINES lines (the middle cut, marked with "…", so the
    start and the results at the end both show)."""
    import matplotlib
    from PIL import ImageDraw, ImageFont

    font = ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSansMono.ttf"),
                              TERMINAL_FONT_PX)
    pad, char_w = 16, font.getlength("M")
    line_h = round(TERMINAL_FONT_PX * 1.35)
    columns = int((VIEWPORT["width"] - 2 * pad) // char_w)
    prompt = terminal_lines("$ " + command, columns)
    body = terminal_lines(output, columns)
    room = TERMINAL_LINES - len(prompt)
    if len(body) > room:
        head = (room - 1) // 2
        tail = room - 1 - head
        body = body[:head] + [f"… ({len(body) - head - tail} lines cut)"] + body[-tail:]
    width = min(VIEWPORT["width"], round(max(map(font.getlength, prompt + body)) + 2 * pad))
    image = Image.new("RGB", (max(width, 480), (len(prompt) + len(body)) * line_h + 2 * pad), (30, 30, 30))
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(prompt + body):
        colour = (130, 220, 130) if i < len(prompt) else (225, 225, 225)
        draw.text((pad, pad + i * line_h), line, font=font, fill=colour)
    return small_png(_png(image))


def _terminal_picture(session: Session, name: str, *args: str) -> None:
    start = time.monotonic()
    output = session.terminal(*args)
    command = "python -m iba_core " + shlex.join(args)
    session.save(name, terminal_png(command, output), time.monotonic() - start, command)


def cli_models(browser, session: Session) -> None:
    _terminal_picture(session, "cli_models", "models")


def cli_stats(browser, session: Session) -> None:
    session.photo_folder("photos", TERMINAL_PHOTOS)
    _terminal_picture(session, "cli_stats", "stats", "--images", "photos", "--n", "8")


def cli_evaluate(browser, session: Session) -> None:
    session.photo_folder("photos", TERMINAL_PHOTOS)
    _terminal_picture(session, "cli_evaluate", "evaluate", "degradation", "--images", "photos", "--limit", "2",
                      "--methods", "saliency,grad_cam", "--tile", "14", "--points", "9",
                      "--out", "eval/degradation.jsonl")


def cli_train_readout(browser, session: Session) -> None:
    """The tiniest training that still shows every part of the output: two epochs of two steps of four crops of
    the offline photos (about half a minute on a CPU)."""
    _terminal_picture(session, "cli_train_readout", "train-readout", "--sample-photos", "8", "--epochs", "2",
                      "--batch-size", "4", "--stats-n", "8", "--out", "readout")


CLI_ACTIONS: dict[str, Callable] = {"cli_attribute": cli_attribute, "cli_compare": cli_compare,
                                    "cli_report": cli_report, "cli_models": cli_models, "cli_stats": cli_stats,
                                    "cli_evaluate": cli_evaluate, "cli_train_readout": cli_train_readout}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", nargs="+", choices=list(PICTURES), default=list(PICTURES), metavar="NAME",
                        help=f"the pictures to make (default: all): {', '.join(PICTURES)}")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} not found: install Debian's chromium package")
    from playwright.sync_api import expect, sync_playwright

    chosen = [n for n in PICTURES if n in args.pages]
    visits = [p for p in PAGE_ACTIONS if p in chosen or (p == "per_sample" and "live_run" in chosen)]
    failed: list[str] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="iba-screens-") as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "IBA_CACHE_DIR": str(tmp / "cache")}
        session = Session(tmp, env, chosen, commit())
        proc, session.url = start_server(tmp / "cache", tmp / "streamlit.log") if visits else (None, "")
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                            args=["--no-sandbox", "--disable-background-networking"])
                try:
                    steps = [(n, lambda n=n: app_page(browser, session, n, expect)) for n in visits]
                    steps += [(n, lambda n=n: CLI_ACTIONS[n](browser, session)) for n in CLI_ACTIONS if n in chosen]
                    for name, step in steps:
                        start = time.monotonic()
                        try:
                            step()
                        except Exception as exc:  # one failed picture must not cost the others (unattended runs)
                            failed.append(name)
                            print(f"{name}: FAILED after {time.monotonic() - start:.0f} s: {exc}", flush=True)
                            traceback.print_exc()
                finally:
                    browser.close()
        finally:
            if proc is not None:
                stop_server(proc)
    print(f"{len(chosen) - len(failed)} of {len(chosen)} pictures in {time.monotonic() - began:.0f} s; "
          f"manifest: {MANIFEST.relative_to(ROOT)}")
    if failed:
        sys.exit(f"failed: {', '.join(failed)} (a failed page's last screen: "
                 f"{Path(tempfile.gettempdir()) / 'iba-screens-failed-<page>.png'})")


if __name__ == "__main__":
    main()
