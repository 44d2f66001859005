#!/usr/bin/env bash
# Builds the peer stack of benchmarks/peers.py into $PEERS (default .peers/), outside `make test`:
#   Debian's Open MPI, parallel HDF5 and PnetCDF (apt-get), a Python venv with mpi4py and h5py
#   built from source against them and SDM installed into it, ADIOS2 built from its source
#   distribution on PyPI with MPI and its ZFP operator (Debian's libzfp), SDM's compression extra in the
#   venv (benchmarks/compression.py), and the C drivers of PnetCDF and ADIOS2 compiled with that mpicc.
# Every step is skipped when its stamp file exists; `rm -rf .peers` starts over.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PEERS="${PEERS:-$ROOT/.peers}"
PYTHON="${PYTHON:-python3.11}"
ADIOS2_VERSION="${ADIOS2_VERSION:-2.12.1.1001}"
MPI4PY_VERSION="${MPI4PY_VERSION:-4.1.1}"
H5PY_VERSION="${H5PY_VERSION:-3.15.1}"
JOBS="${JOBS:-$(nproc)}"
MPICC=/usr/bin/mpicc.openmpi
mkdir -p "$PEERS/stamps" "$PEERS/src" "$PEERS/bin" "$PEERS/build"
log() { printf '[make peers %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
done_() { touch "$PEERS/stamps/$1"; }
have() { [ -e "$PEERS/stamps/$1" ]; }

if ! have apt; then
    log "Debian packages: Open MPI, parallel HDF5 (1.10, Open MPI), PnetCDF"
    packages="openmpi-bin libopenmpi-dev libhdf5-openmpi-dev libpnetcdf-dev pnetcdf-bin pkg-config cmake libzfp-dev"
    if ! dpkg -s $packages >/dev/null 2>&1; then
        SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $packages
    fi
    done_ apt
fi

if ! have adios2; then
    log "ADIOS2 $ADIOS2_VERSION from its PyPI source distribution, with MPI (C and C++ APIs; about 15 min on 2 cores)"
    src="$PEERS/src/adios2-$ADIOS2_VERSION"
    if [ ! -d "$src" ]; then
        if [ ! -f "$PEERS/src/adios2-$ADIOS2_VERSION.tar.gz" ]; then
            url=$("$PYTHON" - "$ADIOS2_VERSION" <<'PY'
import json, sys, urllib.parse, urllib.request
version = sys.argv[1]
base = "https://pypi.org/pypi/adios2/json"
with urllib.request.urlopen(base) as reply:
    files = json.load(reply)["releases"][version]
print(next(urllib.parse.urljoin(base, f["url"]) for f in files if f["packagetype"] == "sdist"))
PY
)
            curl -sSfL -o "$PEERS/src/adios2-$ADIOS2_VERSION.tar.gz" "$url"
        fi
        tar xzf "$PEERS/src/adios2-$ADIOS2_VERSION.tar.gz" -C "$PEERS/src"
    fi
    # ZFP from Debian (libzfp-dev). Blosc2 stays off: Debian 12 has no libblosc2-dev, and the c-blosc2
    # inside the blosc2 wheel (3.x) is refused by ADIOS2's find_package(Blosc2 2.10.1) (another major version)
    off="-DADIOS2_USE_ZFP=ON"
    for option in BigWhoop Blosc2 BZip2 Caliper SZ SZ3 LIBPRESSIO MGARD PRODM PNG DAOS DataMan \
                  DataSpaces MHS SST ZeroMQ HDF5 HDF5_VOL IME Python Fortran Profiling Sodium Catalyst \
                  Campaign OpenSSL XRootD CURL; do
        off="$off -DADIOS2_USE_$option=OFF"
    done
    cmake -S "$src" -B "$PEERS/build/adios2" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX="$PEERS/adios2" -DCMAKE_C_COMPILER=$MPICC \
        -DCMAKE_CXX_COMPILER=/usr/bin/mpicxx.openmpi -DADIOS2_USE_MPI=ON $off \
        -DBUILD_TESTING=OFF -DADIOS2_BUILD_EXAMPLES=OFF -DADIOS2_INSTALL_GENERATE_CONFIG=OFF >"$PEERS/build/adios2.cmake.log"
    cmake --build "$PEERS/build/adios2" -j "$JOBS" >"$PEERS/build/adios2.build.log"
    cmake --install "$PEERS/build/adios2" >/dev/null
    rm -rf "$PEERS/build/adios2"
    done_ adios2
fi

if ! have venv; then
    log "Python venv $PEERS/venv: mpi4py $MPI4PY_VERSION and h5py $H5PY_VERSION built from source against Open MPI and parallel HDF5; SDM"
    "$PYTHON" -m venv "$PEERS/venv"
    pip=("$PEERS/venv/bin/python" -m pip --quiet)
    "${pip[@]}" install --upgrade pip setuptools wheel
    # the same numpy as the project's .venv when it exists, so both stacks run the same array code
    numpy="numpy"
    [ -x "$ROOT/.venv/bin/python" ] && numpy="numpy==$("$ROOT/.venv/bin/python" -c 'import numpy; print(numpy.__version__)')"
    "${pip[@]}" install "$numpy" cython pkgconfig
    MPICC=$MPICC "${pip[@]}" install --no-binary mpi4py --no-build-isolation "mpi4py==$MPI4PY_VERSION"
    CC=$MPICC HDF5_MPI=ON HDF5_PKGCONFIG_NAME=hdf5-openmpi \
        "${pip[@]}" install --no-binary h5py --no-build-isolation "h5py==$H5PY_VERSION"
    # SDM without its MPICH wheel (this stack's MPI is Open MPI): its other dependencies, then SDM itself
    deps=$("$PEERS/venv/bin/python" - "$ROOT/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as fh:
    project = tomllib.load(fh)["project"]
wanted = project["dependencies"] + project["optional-dependencies"]["bench"]
print(" ".join(d.split(";")[0].replace(" ", "") for d in wanted if not d.startswith(("mpich", "mpi4py"))))
PY
)
    "${pip[@]}" install $deps
    "${pip[@]}" install --no-deps -e "$ROOT"
    "$PEERS/venv/bin/python" -c 'import h5py, mpi4py.MPI as M, sdm; assert h5py.get_config().mpi, "h5py without MPI"; print(M.Get_library_version().splitlines()[0])'
    done_ venv
fi

if ! have compression; then
    log "SDM's compression extra in $PEERS/venv (numcodecs, blosc2, zfpy, pysz, hdf5plugin), pinned as pyproject.toml's"
    extra=$("$PEERS/venv/bin/python" - "$ROOT/pyproject.toml" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as fh:
    project = tomllib.load(fh)["project"]
print(" ".join(d.replace(" ", "") for d in project["optional-dependencies"]["compression"]))
PY
)
    "$PEERS/venv/bin/python" -m pip --quiet install $extra
    "$PEERS/venv/bin/python" -c 'import numcodecs, blosc2, zfpy, pysz, hdf5plugin, sdm.codecs as c; c.pipeline_for(c.parse_compression({"codec": "zfp", "tolerance": 1e-3}))'
    done_ compression
fi

log "C drivers of PnetCDF and ADIOS2 (mpicc of Open MPI)"
here="$ROOT/benchmarks/peer_stack"
$MPICC -O2 -Wall -o "$PEERS/bin/peer_pnetcdf" "$here/peer_pnetcdf.c" $(pkg-config --cflags --libs pnetcdf) -lm
$MPICC -O2 -Wall -o "$PEERS/bin/peer_adios2" "$here/peer_adios2.c" -I"$PEERS/adios2/include" \
    -L"$PEERS/adios2/lib" -ladios2_c_mpi -ladios2_c -Wl,-rpath,"$PEERS/adios2/lib" -lm
$MPICC -O2 -Wall -o "$PEERS/bin/compress_adios2" "$here/compress_adios2.c" -I"$PEERS/adios2/include" \
    -L"$PEERS/adios2/lib" -ladios2_c_mpi -ladios2_c -Wl,-rpath,"$PEERS/adios2/lib" -lm
$MPICC -O2 -Wall -o "$PEERS/bin/async_adios2" "$here/async_adios2.c" -I"$PEERS/adios2/include" \
    -L"$PEERS/adios2/lib" -ladios2_c_mpi -ladios2_c -Wl,-rpath,"$PEERS/adios2/lib" -lm
