# scripts/env.sh — sourced (not run) by the scripts in scripts/ and tests/*/: where the repository,
# the binaries and the build are, in one place, so every script finds them the same way.
#   SB_ROOT       the repository root (default: the folder above this file), absolute
#   SB_BIN_DIR    streambatch, streambatch-worker, ... (default $SB_ROOT/bin)
#   SB_BUILD_DIR  the build: bench/, tests/helpers/, plugins/ (default $SB_ROOT/build)
# make sets SB_BIN_DIR and SB_BUILD_DIR (absolute, for BUILD=/BINDIR= builds); a value already
# set is kept as it is. Nothing is exported here: a script that passes them on exports them.
SB_ROOT=${SB_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
SB_BIN_DIR=${SB_BIN_DIR:-$SB_ROOT/bin}
SB_BUILD_DIR=${SB_BUILD_DIR:-$SB_ROOT/build}
