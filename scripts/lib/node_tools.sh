# shellcheck shell=bash
# The one way tests and benchmarks install the npm packages they drive the
# server with (the openai client, transformers.js, puppeteer-core) into a
# folder of their own: once, under a lock, so that tests running at once do
# not install together.
#   npm_packages DIR [--ignore-scripts] NAME@VERSION...
# A package counts as installed when DIR/node_modules/NAME exists. Returns 1,
# saying so, when npm fails.
npm_packages() {
  local dir=$1
  shift
  local flags=() packages=() package
  for package in "$@"; do
    case $package in
      --*) flags+=("$package") ;;
      *) packages+=("$package") ;;
    esac
  done
  mkdir -p "$dir"
  (
    flock 9
    for package in "${packages[@]}"; do
      [ -d "$dir/node_modules/${package%@*}" ] && continue
      npm install --silent --no-audit --no-fund "${flags[@]}" --prefix "$dir" "${packages[@]}" \
        > /dev/null || { echo "npm install ${packages[*]} failed; is the npm registry reachable?" >&2; exit 1; }
      break
    done
  ) 9> "$dir/.lock"
}
