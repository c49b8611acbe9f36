#!/bin/sh
# Rebuild census.tsv from bare clones of the four repositories.
# Usage: NCCL=... OFI=... SHARP=... FASTSOCKET=... ./regen.sh   (each a git dir with its tags)
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
X=$HERE/extract.py
NCCL=${NCCL:-/work/.mirror/NVIDIA+nccl/repo}
OFI=${OFI:-/work/.mirror/aws+aws-ofi-nccl/repo}
SHARP=${SHARP:-/work/.mirror/Mellanox+nccl-rdma-sharp-plugins/repo}
FASTSOCKET=${FASTSOCKET:-/work/.mirror/google+nccl-fastsocket/repo}
T=$(mktemp -d)
cd $NCCL && TAGS=$(git tag | grep '^v2\.' | sort -V | awk '/v2.3.7-1/{p=1} p; /v2.30.7-1/{exit}'); PREFIXES=src/ python3 $X . $T/raw_nccl.jsonl $TAGS
cd $OFI && TAGS=$(git tag | grep -v rc | sort -V); PREFIXES=src/,include/ python3 $X . $T/raw_ofi.jsonl $TAGS master
cd $SHARP && TAGS=$(git tag | sort -V); PREFIXES=src/,include/ python3 $X . $T/raw_sharp.jsonl $TAGS master
cd $FASTSOCKET && python3 $X . $T/raw_fs.jsonl master
python3 $HERE/census.py $HERE/census.tsv nccl=$T/raw_nccl.jsonl aws-ofi-nccl=$T/raw_ofi.jsonl \
  nccl-rdma-sharp-plugins=$T/raw_sharp.jsonl nccl-fastsocket=$T/raw_fs.jsonl
# Network names the plugins register (slow: one git show per file and tag).
NT=$(git --git-dir $NCCL tag | grep '^v2\.' | sort -V | awk '/v2.3.7-1/{p=1} p; /v2.30.7-1/{exit}' | paste -sd,)
OT=$(git --git-dir $OFI tag | grep -v rc | sort -V | paste -sd,),master
ST=$(git --git-dir $SHARP tag | sort -V | paste -sd,),master
python3 $HERE/netnames.py $HERE/net-names.tsv nccl=$NCCL:src/:$NT aws-ofi-nccl=$OFI:src/+include/:$OT \
  nccl-rdma-sharp-plugins=$SHARP:src/+include/:$ST nccl-fastsocket=$FASTSOCKET::master
# NCCL Inspector's JSON records, from the plugin's writer at every tag.
python3 $HERE/inspector.py $NCCL $HERE/inspector.tsv
rm -r "$T"
