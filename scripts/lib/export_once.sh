# shellcheck shell=bash
# Exports a downloaded model directory (a Hugging Face checkpoint that
# attn-export reads, with its tokenizer and chat template) once: again only
# when a file in the directory is newer than the package. scripts/serve.sh
# --export and the tests that export checkpoints use it.
#   export_once ATTN_EXPORT DIR OUT_DIR   # prints OUT_DIR/NAME.pt; attn-export's
#                                         # report goes to stderr
export_once() {
  local export_bin=$1 dir=${2%/} out_dir=$3
  [ -d "$dir" ] || { echo "export_once: $dir is not a directory" >&2; return 2; }
  local package
  package=$out_dir/$(basename "$dir").pt
  mkdir -p "$out_dir"
  if [ ! -f "$package" ] || [ -n "$(find "$dir" -newer "$package" -print -quit)" ]; then
    echo "exporting $dir to $package" >&2
    "$export_bin" --input="$dir" --output="$package.tmp" >&2 || {
      rm -f "$package.tmp"
      echo "export of $dir failed: attn-export --help says what it reads" >&2
      return 1
    }
    mv "$package.tmp" "$package"
  fi
  echo "$package"
}
