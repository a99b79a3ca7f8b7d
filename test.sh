#!/usr/bin/env bash
# The README's test command: installs what the tests need from outside the workspace
# (once; a second run installs nothing), then runs every test of the workspace and of the
# vendored fuser. Extra arguments go to `cargo test` (e.g. `./test.sh -p weft-client`).
#
# Needs: Linux with /dev/fuse, root (the tests mount FUSE file systems and switch to other
# users), Rust (cargo), python3 (its venv module: python3-venv is installed with apt-get
# when missing), openssl (likewise), node and npm (likewise: Azurite's), and the
# crates.io registry, PyPI and the npm registry for the pinned test tools.
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" -ne 0 ]; then
    echo "test.sh: the tests mount FUSE file systems and act as other users: run it as root" >&2
    echo "         (sudo -E ./test.sh); 'cargo test -p weft-proto' and the like need no root." >&2
    exit 1
fi
if [ ! -c /dev/fuse ]; then
    echo "test.sh: /dev/fuse is missing: load the fuse module (modprobe fuse)" >&2
    exit 1
fi

# openssl makes the certificates of the Python TLS test (crates/weft-py/pytests/test_secure.py).
if ! command -v openssl >/dev/null; then
    if command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq openssl
    else
        echo "test.sh: openssl is missing (the TLS test makes its certificates with it)" >&2
        exit 1
    fi
fi

# The POSIX suites' tools (crates/weft-cli/tests/it/posix_suites.rs), at the versions
# their configurations were written for, installed under target/ so that nothing outside
# the checkout changes. (The S3 tests' s3s-fs server is built into weft-testkit.)
tools="$PWD/target/test-tools"
install_tool() {
    local name=$1 version=$2 features=${3:-}
    local bin="$tools/bin/$name"
    if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -qw "$version"; then
        return
    fi
    echo "== installing $name $version into $tools"
    # Optimised less than a release build (opt-level 1): the tools only drive the tests,
    # and a full release build of them took minutes of CI's two cores.
    CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
        cargo install --quiet --locked --force --root "$tools" "$name" --version "$version" \
        ${features:+--features "$features"}
}
# moto's S3 server (Python) in a virtual environment of its own; only its moto_server is
# put on PATH (through target/test-tools/bin), not the environment's python.
venv="$tools/venv"
moto_ok() {
    "$venv/bin/python" -c 'import moto, sys; sys.exit(0 if moto.__version__.startswith("5.") else 1)' \
        2>/dev/null && [ -x "$venv/bin/moto_server" ]
}
if ! moto_ok; then
    echo "== installing moto[server] 5 into $venv"
    if [ ! -x "$venv/bin/python" ] || [ ! -x "$venv/bin/pip" ]; then
        rm -rf "$venv"
        if ! python3 -m venv "$venv" >/dev/null 2>&1; then
            # Debian and Ubuntu ship venv (ensurepip) in a package of its own.
            rm -rf "$venv"
            if command -v apt-get >/dev/null; then
                apt-get update -qq && apt-get install -y -qq python3-venv
                python3 -m venv "$venv"
            else
                echo "test.sh: 'python3 -m venv' fails: install Python's venv module" >&2
                exit 1
            fi
        fi
    fi
    # In the background: pip mostly downloads and unpacks while the cargo installs
    # below compile (the environment itself was made above, one at a time, since making
    # it may need apt-get). --no-compile (here and for the Python tools below): Python
    # compiles a module when it is first imported instead of every module at install
    # (PyTorch has thousands: ~30 s of CPU the build would lose).
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-compile 'moto[server]>=5,<6' &
    moto_pip=$!
fi

# Azurite (Microsoft's Azure Storage emulator, Node.js) for the az:// repository test
# and its event queue (crates/weft-cli/tests/it/repo_s3.rs, crates/weft-repo/tests/events.rs),
# from the npm registry into target/test-tools/azurite,
# in the background like moto; node and npm come from apt-get where missing. 3.35.0: the
# last release that runs on the Node.js of Debian 12's packages (18; 3.36 wants 21 or later).
azurite_version=3.35.0
azurite_dir="$tools/azurite"
azurite_ok() {
    [ -x "$azurite_dir/node_modules/.bin/azurite" ] &&
        grep -qs "\"version\": \"$azurite_version\"" "$azurite_dir/node_modules/azurite/package.json"
}
if ! azurite_ok; then
    echo "== installing azurite $azurite_version into $azurite_dir"
    if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
        if command -v apt-get >/dev/null; then
            apt-get update -qq && apt-get install -y -qq nodejs npm
        else
            echo "test.sh: node and npm are missing (the az:// test runs Azurite)" >&2
            exit 1
        fi
    fi
    mkdir -p "$azurite_dir"
    npm install --no-audit --no-fund --silent --prefix "$azurite_dir" "azurite@$azurite_version" &
    azurite_npm=$!
fi

# ---- Python (issue 26): the weftfs package of crates/weft-py ----------------------------
# Its build and test tools in a virtual environment of their own (the moto one's pattern);
# the wheel is built beside the cargo tests and its pytest suite run after them (below).
# Only for the whole run, without arguments. PyTorch (for the real-DataLoader and
# state-dict tests) comes from PyPI with its CUDA libraries, ~3 GB to download and 5 GB
# installed (the CPU-only wheels are on download.pytorch.org, which CI cannot reach): the
# install runs in the background during the Rust build and is waited for only before the
# wheel is built.
pyvenv="$tools/pyvenv"
py_tools='maturin>=1.9.4,<2 pytest>=9,<10 fsspec>=2026,<2027 pyarrow>=26,<27 pandas>=3,<4
    datasets>=5,<6 torch>=2.15,<3'
py_ok() {
    "$pyvenv/bin/python" -c 'import maturin, pytest, fsspec, pyarrow, pandas, datasets, torch' 2>/dev/null
}
if [ $# -eq 0 ] && ! py_ok; then
    echo "== installing the Python test tools into $pyvenv"
    rm -rf "$pyvenv"
    python3 -m venv "$pyvenv"
    # shellcheck disable=SC2086 # the requirement list splits into words on purpose
    "$pyvenv/bin/pip" install --quiet --disable-pip-version-check --no-compile $py_tools &
    py_pip=$!
fi
# ---- end of Python ----------------------------------------------------------------------
install_tool pjdfstest 0.2.2
install_tool fsx 0.3.2
if [ -n "${moto_pip:-}" ] && ! wait "$moto_pip"; then
    echo "test.sh: installing moto[server] into $venv failed" >&2
    exit 1
fi
if [ -n "${azurite_npm:-}" ] && ! wait "$azurite_npm"; then
    echo "test.sh: installing azurite into $azurite_dir failed" >&2
    exit 1
fi
mkdir -p "$tools/bin"
ln -sf "$venv/bin/moto_server" "$tools/bin/moto_server"
ln -sf "$azurite_dir/node_modules/.bin/azurite" "$tools/bin/azurite"
export PATH="$tools/bin:$PATH"

# Clippy's lints (-D warnings) inside the test build: what `cargo clippy --workspace
# --all-targets -- -D warnings` checks (cargo-clippy's own mechanism: clippy-driver wraps
# rustc for the workspace's crates), but with code generation, so the crates are compiled
# once for lints and tests instead of twice (a separate clippy run was 8.5 of CI's 39
# minutes). The build below makes every lib, bin and test target (the workspace has no
# benches or examples), so every target is linted, and a lint fails the run.
if command -v rustup >/dev/null; then
    if ! clippy=$(rustup which clippy-driver 2>/dev/null); then
        echo "== installing clippy (rustup component add clippy)"
        rustup component add clippy
        clippy=$(rustup which clippy-driver)
    fi
elif ! clippy=$(command -v clippy-driver); then
    echo "test.sh: clippy-driver not found: install clippy with your Rust toolchain" >&2
    exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

# The weft-repo tests start the `weft` binary, which cargo builds only for weft-cli's own
# tests: build it first. For the whole workspace, with the test build itself (`--no-run`):
# a plain `cargo build -p weft-cli` resolves other features for shared dependencies, and
# the test build then compiled tokio, hyper, object_store and 40 more crates a second time.
if [ $# -eq 0 ]; then
    cargo test --workspace --no-run --quiet
else
    cargo build --quiet -p weft-cli --bin weft
fi

# The unprivileged users and groups pjdfstest switches to (its configuration's
# dummy_auth): Debian and Ubuntu have them; other systems get them made here.
ensure_group() {
    getent group "$1" >/dev/null || groupadd --system "$1"
}
ensure_user() {
    local user=$1 group=$2
    ensure_group "$group"
    getent passwd "$user" >/dev/null ||
        useradd --system --gid "$group" --no-create-home --shell /usr/sbin/nologin "$user"
}
ensure_user nobody nogroup
ensure_user daemon daemon

# Every test binary runs even when one fails (--no-fail-fast); the per-binary summaries
# are added up at the end so that the last line says how many tests ran in all.
log=$(mktemp)
py_log=$(mktemp)
fuser_log=$(mktemp)
posix_log=$(mktemp)
trap 'rm -f "$log" "$py_log" "$fuser_log" "$posix_log"' EXIT
# Waits for a run started beside the cargo tests (PID), prints its log (OUT) under TITLE,
# adds its summaries to the total and its failure to the run's status.
collect() {
    local pid=$1 out=$2 title=$3 rc
    wait "$pid"
    rc=$?
    echo "== $title"
    cat "$out"
    cat "$out" >>"$log"
    [ "$status" -ne 0 ] || status=$rc
}
set +e
if [ -n "${py_pip:-}" ] && ! wait "$py_pip"; then
    echo "test.sh: installing the Python test tools into $pyvenv failed" >&2
    exit 1
fi
# The whole run: the cargo tests leave a third of CI's two cores idle (their servers,
# mounts and S3 stores wait on each other), so the rest runs beside them at a lower CPU
# priority, taking only what the tests leave: the random-operation runs (fsx and the
# two-mount exerciser of crates/weft-cli/tests/it/posix_suites.rs, minutes of CPU each
# and nothing timed), the vendored fuser's tests, and the build of the Python package
# (issue 26: the weftfs wheel built by maturin and installed; its pytest suite runs
# against the `weft` the test build made once the cargo tests are done). Their logs are
# printed after cargo's.
if [ $# -eq 0 ]; then
    # The same build as the main run's (--workspace: the same features), its `it` binary
    # only, the POSIX suites only; the main run skips them.
    nice -n 5 cargo test --workspace --test it --no-fail-fast -- posix_suites:: >"$posix_log" 2>&1 &
    posix_pid=$!
    # The vendored fuser is outside the workspace (vendor/README.md): its unit tests, with
    # those of the turn-taking reader and of FUSE over io_uring weftfs added (the latter
    # mount over the ring and over /dev/fuse as root). Not ours to lint: the clippy wrapper
    # set above is left out.
    env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS nice -n 10 \
        cargo test --manifest-path vendor/fuser/Cargo.toml --lib --locked --target-dir target/vendor-fuser \
        >"$fuser_log" 2>&1 &
    fuser_pid=$!
    (
        rm -rf target/wheels-py
        # maturin resolves weft-py alone; weft-py's Cargo.toml declares what makes that
        # resolution equal the test build's, so only pyo3 and weft-py are compiled here.
        nice -n 19 "$pyvenv/bin/maturin" build --quiet -m crates/weft-py/Cargo.toml -o target/wheels-py &&
            "$pyvenv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
                target/wheels-py/weftfs-*.whl
    ) >"$py_log" 2>&1 &
    py_pid=$!
    cargo test --workspace --no-fail-fast -- --skip posix_suites:: 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    # The pytest suite once the cargo tests are done (their build made the `weft` it
    # starts), beside the POSIX run.
    wait "$py_pid" &&
        WEFT_BIN="$PWD/target/debug/weft" "$pyvenv/bin/python" -m pytest -q -rs -p no:cacheprovider \
            --junitxml=target/wheels-py/pytest.xml crates/weft-py/pytests >>"$py_log" 2>&1
    py_status=$?
    collect "$posix_pid" "$posix_log" "the POSIX suites through the mount (run beside the other tests)"
    collect "$fuser_pid" "$fuser_log" "the vendored fuser's unit tests (run beside the cargo tests)"
    echo "== weftfs Python package: maturin build and install (beside the cargo tests), pytest"
    cat "$py_log"
    # pytest's summary line is not cargo's: its counts are read from the JUnit report
    # (none: the build or the install failed, counted as one failure).
    py_counts=$("$pyvenv/bin/python" - target/wheels-py/pytest.xml <<'PY' 2>/dev/null || echo "0 1 0"
import sys, xml.etree.ElementTree as ET
s = ET.parse(sys.argv[1]).getroot()
s = s if s.tag == "testsuite" else s.find("testsuite")
t, f, e, k = (int(s.get(a, 0)) for a in ("tests", "failures", "errors", "skipped"))
print(t - f - e - k, f + e, k)
PY
    )
    [ "$status" -ne 0 ] || status=$py_status
    [ "$status" -ne 0 ] || [ "$(echo "$py_counts" | cut -d' ' -f2)" -eq 0 ] || status=1
else
    # A selection (`-p CRATE`, `--test NAME`, filters): cargo takes --workspace over -p.
    cargo test --no-fail-fast "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    py_counts="0 0 0"
fi
set -e
awk -v py="$py_counts" '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { split(py, c, " "); p += c[1]; f += c[2]; s += c[3]
           printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$log"
exit "$status"
