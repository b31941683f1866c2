#!/usr/bin/env bash
# scripts/fetch_data.sh SRC DEST — fill DEST/mnist and DEST/fashion-mnist with the four standard
# gzip IDX files each (`make data` runs it as: scripts/fetch_data.sh "$(DATA_SRC)" data).
#
# For every file: if DEST already holds it with the published md5, it is left alone (so the
# script is idempotent); otherwise it is copied from SRC/<set>/<file> when that exists, else
# downloaded from the public mirror (curl or wget). The new file is written as <file>.part, its
# md5 is checked, and only then is it renamed into place; a mismatch deletes it and prints one
# line naming the file. A file already in DEST with a wrong md5 is replaced.
#
# Environment: FETCH_DATA_OFFLINE=1 never downloads (a file missing from SRC is then an error);
# MNIST_MIRROR / FASHION_MNIST_MIRROR override the mirror URLs (ending in /).
# Exit codes: 0 all 8 files verified; 2 usage; 4 a file could not be fetched or failed its md5
# check (every such file is named on stderr); 6 DEST cannot be written.
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 SRC DEST   (e.g. $0 ../shared/data data)" >&2
  exit 2
fi
SRC=$1
DEST=$2

MNIST_MIRROR=${MNIST_MIRROR:-https://ossci-datasets.s3.amazonaws.com/mnist/}
FASHION_MNIST_MIRROR=${FASHION_MNIST_MIRROR:-http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/}

# The published md5 of each file (also in ../shared/data/README.md).
expected_md5() {
  case $1 in
    mnist/train-images-idx3-ubyte.gz) echo f68b3c2dcbeaaa9fbdd348bbdeb94873 ;;
    mnist/train-labels-idx1-ubyte.gz) echo d53e105ee54ea40749a09fcbcd1e9432 ;;
    mnist/t10k-images-idx3-ubyte.gz) echo 9fb629c4189551a2d022fa330f9573f3 ;;
    mnist/t10k-labels-idx1-ubyte.gz) echo ec29112dd5afa0611ce80d1b7f02629c ;;
    fashion-mnist/train-images-idx3-ubyte.gz) echo 8d4fb7e6c68d591d4c3dfef9ec88bf0d ;;
    fashion-mnist/train-labels-idx1-ubyte.gz) echo 25c81989df183df01b3e8a0aad5dffbe ;;
    fashion-mnist/t10k-images-idx3-ubyte.gz) echo bef4ecab320f06d8554ea6380940ec79 ;;
    fashion-mnist/t10k-labels-idx1-ubyte.gz) echo bb300cfdad3c16e7a12a480ee83cd310 ;;
  esac
}
SETS=(mnist fashion-mnist)
FILES=(train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz)

md5_of() {
  if command -v md5sum >/dev/null 2>&1; then
    md5sum "$1" | cut -d' ' -f1
  elif command -v md5 >/dev/null 2>&1; then
    md5 -q "$1"
  else
    echo "fetch_data: missing dependency: md5sum (coreutils)" >&2
    exit 2
  fi
}

download() {  # download URL OUT
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 --connect-timeout 20 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget -q --tries=3 --timeout=20 -O "$2" "$1"
  else
    echo "fetch_data: missing dependency: curl or wget" >&2
    return 1
  fi
}

failed=0
verified=0
for set in "${SETS[@]}"; do
  if ! mkdir -p "$DEST/$set" 2>/dev/null || [ ! -w "$DEST/$set" ]; then
    echo "fetch_data: $DEST/$set: cannot create or write the folder" >&2
    exit 6
  fi
  case $set in
    mnist) mirror=$MNIST_MIRROR ;;
    fashion-mnist) mirror=$FASHION_MNIST_MIRROR ;;
  esac
  for f in "${FILES[@]}"; do
    want=$(expected_md5 "$set/$f")
    out=$DEST/$set/$f
    if [ -f "$out" ]; then
      if [ "$(md5_of "$out")" = "$want" ]; then
        echo "fetch_data: $out: present, md5 ok"
        verified=$((verified + 1))
        continue
      fi
      echo "fetch_data: $out: present but md5 differs; fetching it again"
      rm -f "$out"
    fi
    part=$out.part
    rm -f "$part"
    if [ -f "$SRC/$set/$f" ]; then
      from=$SRC/$set/$f
      if ! cp "$from" "$part" 2>/dev/null; then
        rm -f "$part"
        echo "fetch_data: $out: cannot copy from $from" >&2
        failed=1
        continue
      fi
      chmod u+w "$part" 2>/dev/null  # the source may be read-only; our copy need not be
    elif [ "${FETCH_DATA_OFFLINE:-0}" = 1 ]; then
      echo "fetch_data: $out: not in $SRC/$set and downloads are off (FETCH_DATA_OFFLINE=1)" >&2
      failed=1
      continue
    else
      from=$mirror$f
      echo "fetch_data: $out: downloading $from"
      if ! download "$from" "$part"; then
        rm -f "$part"
        echo "fetch_data: $out: download from $from failed" >&2
        failed=1
        continue
      fi
    fi
    got=$(md5_of "$part")
    if [ "$got" != "$want" ]; then
      rm -f "$part"
      echo "fetch_data: $out: md5 mismatch (got $got, expected $want; from $from); bad file deleted" >&2
      failed=1
      continue
    fi
    mv -f "$part" "$out"
    echo "fetch_data: $out: md5 ok (from $from)"
    verified=$((verified + 1))
  done
done

if [ "$failed" != 0 ]; then
  echo "fetch_data: $verified of 8 files verified; see the errors above" >&2
  exit 4
fi
echo "fetch_data: all 8 files verified in $DEST"
