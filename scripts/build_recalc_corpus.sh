#!/usr/bin/env bash
# Rebuild the development corpus of `spreadrl bench recalc-fidelity`: workbooks that
# public packages ship in their source distributions (PyPI sdists), kept only when
# Microsoft Excel saved them with cached values (the bench itself skips the others).
#   xlcalculator 0.5.0 (MIT): tests/resources, 56 Excel-saved workbooks with formulas
#   xlrd 1.2.0 (BSD):        tests/, 1 Excel-saved workbook with formulas (reveng1.xlsx)
# Searched and found without workbooks in their sdists: pycel, formulas, koala2,
# openpyxl (2.4, 3.1), XlsxWriter, pylightxl.
# Usage: scripts/build_recalc_corpus.sh [OUT]   (default .cache/recalc-corpus, git-ignored)
set -euo pipefail
OUT="${1:-.cache/recalc-corpus}"
PIP="${PIP:-python3 -m pip}"
mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fetch() {  # fetch PACKAGE==VERSION FOLDER-INSIDE-SDIST
    local spec="$1" inner="$2" name="${1%%==*}"
    if [ -d "$OUT/$name" ] && [ -n "$(ls -A "$OUT/$name")" ]; then
        echo "$OUT/$name: already there"; return; fi
    $PIP download -q --no-deps --no-binary :all: "$spec" -d "$work" 2>&1 | grep -v '^WARNING' || true
    local sdist; sdist="$(ls "$work"/"${name}"-*.tar.gz 2>/dev/null | head -1 || true)"
    if [ -z "$sdist" ]; then echo "warning: could not download $spec" >&2; return; fi
    tar -xzf "$sdist" -C "$work"
    mkdir -p "$OUT/$name"
    find "$work/${name}-${spec##*==}/$inner" -maxdepth 1 -type f \( -name '*.xlsx' -o -name '*.xlsm' \) \
        -exec cp {} "$OUT/$name/" \;
    echo "$OUT/$name: $(ls "$OUT/$name" | wc -l) workbooks"
}
fetch xlcalculator==0.5.0 tests/resources
fetch xlrd==1.2.0 tests
