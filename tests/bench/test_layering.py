"""The benchmark harness is a Device-level tool: the library never imports it (only the CLI's
``bench``/``bundle`` subcommands do), and it does not need MLIR to run from a bundle."""
import ast
import pathlib
import subprocess
import sys

PKG = pathlib.Path(__file__).resolve().parents[2] / "cutedsl"


def test_nothing_in_the_library_imports_bench():
    for f in PKG.rglob("*.py"):
        rel = f.relative_to(PKG)
        if rel.parts[0] == "bench" or rel.name in ("cli.py", "__main__.py") and len(rel.parts) == 1:
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")] + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            assert not any("bench" in n.split(".") for n in names), f"{rel} imports the bench harness"


def test_bench_modules_import_without_mlir_and_optional_extras():
    code = ("import sys\n"
            "for m in ('mlir', 'rich', 'tqdm', 'matplotlib', 'torch', 'cupy'): sys.modules[m] = None\n"
            "import cutedsl.bench.cli, cutedsl.bench.runner, cutedsl.bench.bundle, cutedsl.bench.report\n"
            "import cutedsl.bench.libs, cutedsl.bench.identity\n"
            "from cutedsl.bench.configs import accepted_schedules\n"
            "print(accepted_schedules())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "multistage" in r.stdout, r.stderr


def test_the_bench_harness_never_imports_the_cli():
    """Issue 22: bench/cli.py and bench/bundle.py imported helpers from cutedsl/cli.py, which
    imports bench/cli.py -- a cycle; the shared argument helpers now live in cutedsl/cliargs.py."""
    for f in (PKG / "bench").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                mod = ("." * node.level) + (node.module or "")
                names = [a.name for a in node.names]
                assert mod != "..cli" and not (mod == ".." and "cli" in names), f"{f.name} imports cutedsl.cli"
    code = "import sys; import cutedsl.bench.bundle, cutedsl.bench.cli; print('cutedsl.cli' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr
