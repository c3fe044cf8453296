#!/usr/bin/env bash
# Rebuild a corpus of `spreadrl bench recalc-fidelity`: workbooks that public packages ship,
# kept only when Microsoft Excel saved them with cached values (the bench itself skips the
# others). Two corpora, never mixed:
#
# development (default; .cache/recalc-corpus): what the hybrid engine's rules were chosen on.
#   xlcalculator 0.5.0 (PyPI sdist, MIT): tests/resources, 56 Excel-saved workbooks with formulas
#   xlrd 1.2.0 (PyPI sdist, BSD):        tests/, 1 Excel-saved workbook with formulas (reveng1.xlsx)
#   Searched and found without workbooks in their sdists: pycel, formulas (latest), koala2,
#   openpyxl (2.3, 2.4, 3.1), XlsxWriter, pylightxl.
#
# held-out (.cache/recalc-held-out): measured once after the rules were written, never tuned on
# (docs/benchmarks.md). Archives are pinned by version and sha256.
#   formulas 1.2.0 (PyPI sdist, EUPL 1.1):  test/test_files (4 workbooks; later sdists dropped them)
#   pyexcel-xlsx 0.6.1 (PyPI sdist, BSD):   tests/fixtures
#   tablib 3.10.0 (PyPI sdist, MIT):        tests/files
#   r-cran-openxlsx 4.2.5.2-1, r-cran-readxl 1.4.2-1 (Debian 12 packages, `apt-get download`,
#   GPL-3): the workbooks the R packages ship in extdata; skipped with a warning where
#   apt-get is missing or does not know the version (run apt-get update).
#   Added 2026-11-24 (measured once, not tuned on):
#   csvkit 2.2.0 (PyPI sdist, MIT): examples; pyexcel-xlsxw 0.6.1 (PyPI sdist, BSD):
#   tests/test-fixtures; and three Debian 12 *source* packages (`apt-get source`, through a
#   private apt configuration with a deb-src line, so the machine's own is left alone):
#   liborcus 0.17.2-2 (MPL-2.0): test/xlsx, Excel-saved files exercising formulas, tables,
#   named expressions and array results; libxlsxwriter 1.1.4-2 (BSD): test/functional/
#   xlsx_files, the files Excel saved for its comparison tests; gnumeric 1.12.55-1 (GPL):
#   samples. Nested folders are flattened into file names (a__b.xlsx).
#   Tried without a usable result: xlwings, python-calamine, pandas (sdists need a Rust or
#   C build to download), messytables, tabulator, rows, goodtables, sheetfu, pyexcel-xlsxr,
#   flyingkoala, formulas 0.4.0/1.0.0 (no Excel-saved formulas); npm read-excel-file,
#   xlsx-template, node-xlsx, excel4node, hot-formula-parser, convert-excel-to-json,
#   xlsx-extract, better-xlsx, excel-formula, hyperformula (none); Debian sources of
#   xlsxwriter, openpyxl, pandas, ruby-roo, r-cran-readxl (not on the mirror here).
#   Searched and found without Excel-saved formulas: agate-excel, xlsx2csv, pyexcel, pyexcel-io,
#   xlsx2html, tidyxl (PyPI); pandas wheels (no test data); exceljs, xlsx-calc, xlsx-populate,
#   fast-formula-parser (npm); r-cran-rio, golang-github-tealeg-xlsx-dev (Debian).
#
# Usage: scripts/build_recalc_corpus.sh [OUT] [development|held-out]
set -euo pipefail
SET="${2:-development}"
case "$SET" in
    development) OUT="${1:-.cache/recalc-corpus}" ;;
    held-out) OUT="${1:-.cache/recalc-held-out}" ;;
    *) echo "usage: $0 [OUT] [development|held-out]" >&2; exit 2 ;;
esac
PIP="${PIP:-python3 -m pip}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"  # absolute: copy_tree works from inside the unpacked source
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

done_already() { [ -d "$OUT/$1" ] && [ -n "$(ls -A "$OUT/$1")" ] && echo "$OUT/$1: already there"; }

checksum_ok() {  # checksum_ok FILE SHA256 (an empty SHA256 is not checked)
    [ -z "$2" ] && return 0
    if [ "$(sha256sum "$1" | cut -d' ' -f1)" != "$2" ]; then
        echo "warning: $(basename "$1"): sha256 differs from the pinned one; skipped" >&2
        return 1
    fi
}

copy_workbooks() {  # copy_workbooks FROM-DIR NAME
    mkdir -p "$OUT/$2"
    find "$1" -maxdepth 1 -type f \( -name '*.xlsx' -o -name '*.xlsm' \) -exec cp {} "$OUT/$2/" \;
    echo "$OUT/$2: $(ls "$OUT/$2" | wc -l) workbooks"
}

fetch() {  # fetch PACKAGE==VERSION FOLDER-INSIDE-SDIST [SHA256]
    local spec="$1" inner="$2" sha="${3:-}" name="${1%%==*}" version="${1##*==}"
    done_already "$name" && return
    $PIP download -q --no-deps --no-binary :all: "$spec" -d "$work" 2>&1 | grep -v '^WARNING' || true
    local stem="${name//-/_}" sdist
    sdist="$(ls "$work"/"$name"-"$version".tar.gz "$work"/"$stem"-"$version".tar.gz 2>/dev/null | head -1 || true)"
    if [ -z "$sdist" ]; then echo "warning: could not download $spec" >&2; return; fi
    checksum_ok "$sdist" "$sha" || return 0
    tar -xzf "$sdist" -C "$work"
    copy_workbooks "$(ls -d "$work"/"$name"-"$version" "$work"/"$stem"-"$version" 2>/dev/null | head -1)/$inner" "$name"
}

fetch_deb() {  # fetch_deb PACKAGE=VERSION FOLDER-INSIDE-PACKAGE SHA256
    local spec="$1" inner="$2" sha="$3" name="${1%%=*}"
    done_already "$name" && return
    if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
        echo "warning: apt-get/dpkg-deb missing: $spec skipped" >&2; return; fi
    if ! (cd "$work" && apt-get download -q "$spec" >/dev/null 2>&1); then
        echo "warning: apt-get download $spec failed (apt-get update first?): skipped" >&2; return; fi
    local deb; deb="$(ls "$work"/"$name"_*.deb | head -1)"
    checksum_ok "$deb" "$sha" || return 0
    dpkg-deb -x "$deb" "$work/$name"
    copy_workbooks "$work/$name/$inner" "$name"
}

copy_tree() {  # copy_tree FROM-DIR NAME: every workbook below FROM-DIR, paths flattened
    mkdir -p "$OUT/$2"
    (cd "$1" && find . -type f \( -name '*.xlsx' -o -name '*.xlsm' \) | while read -r f; do
        f="${f#./}"; cp "$f" "$OUT/$2/${f//\//__}"; done)
    echo "$OUT/$2: $(ls "$OUT/$2" | wc -l) workbooks"
}

fetch_debsrc() {  # fetch_debsrc SOURCE=VERSION FOLDER-INSIDE-ORIG ORIG-SHA256
    local spec="$1" inner="$2" sha="$3" name="${1%%=*}"
    done_already "$name" && return
    if ! command -v apt-get >/dev/null; then echo "warning: apt-get missing: $spec skipped" >&2; return; fi
    local apt="$work/apt"
    mkdir -p "$apt/parts" "$apt/lists/partial" "$apt/cache/archives/partial"
    printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        > "$apt/parts/src.sources"
    local opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt/parts"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache")
    if [ ! -e "$apt/updated" ]; then
        apt-get "${opts[@]}" update -qq >/dev/null 2>&1 && touch "$apt/updated"
    fi
    mkdir -p "$work/src-$name"
    if ! (cd "$work/src-$name" && apt-get "${opts[@]}" source --download-only -qq "$spec" >/dev/null 2>&1); then
        echo "warning: apt-get source $spec failed: skipped" >&2; return; fi
    local orig; orig="$(ls "$work/src-$name"/*.orig.tar.* | head -1)"
    checksum_ok "$orig" "$sha" || return 0
    tar -xf "$orig" -C "$work/src-$name" --wildcards '*.xlsx' '*.xlsm' 2>/dev/null || true
    copy_tree "$(ls -d "$work/src-$name"/*/ | head -1)$inner" "$name"
}

if [ "$SET" = development ]; then
    fetch xlcalculator==0.5.0 tests/resources
    fetch xlrd==1.2.0 tests
else
    fetch formulas==1.2.0 test/test_files 71d5fe13a8e0d815d7fced7a935831b6805cc710b7c360fb39f317f83070ef76
    fetch pyexcel-xlsx==0.6.1 tests/fixtures 80b7985d394b73abf5c52212027bbbc0c7f6090192bcbc76403f8672d74c7960
    fetch tablib==3.10.0 tests/files 781cfa9a42de8f33c52aff857fd0a04e483de4fd1c53eaaa9a6aeac62bad11de
    fetch_deb r-cran-openxlsx=4.2.5.2-1 usr/lib/R/site-library/openxlsx/extdata \
        cc998ce373488a27ed2baab183268fafae7a44dcfd08ba5c1a5fd10e9b4e64a1
    fetch_deb r-cran-readxl=1.4.2-1 usr/lib/R/site-library/readxl/extdata \
        eb705525f906c968022162e8e58993a8b444ae900ff0487389769721bdcb4e67
    fetch csvkit==2.2.0 examples 147318a8dbaec07c0bbb9291c14b78de5fa32ed3d4a5c2396e52a83c0a30df6b
    fetch pyexcel-xlsxw==0.6.1 tests/test-fixtures \
        599c757ffda4d233ef3a9c9b1f8acecb325d11a8a788e39a64e52ca82d504cce
    fetch_debsrc liborcus=0.17.2-2 test/xlsx \
        30509d414e3cf439e0ae1e0c31b4b0ef5b2bb8e2b2404e3cb7d44a72162640ab
    fetch_debsrc libxlsxwriter=1.1.4-2 test/functional/xlsx_files \
        b379eb35fdd9c653ebe72485b9c992f612c7ea66f732784457997d6e782f619b
    fetch_debsrc gnumeric=1.12.55-1 samples \
        c69a09cd190b622acca476bbc3d4c03d68d7ccf59bba61bf036ce60885f9fb65
fi
