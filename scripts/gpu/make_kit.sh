#!/usr/bin/env bash
# Packs, on this machine, what a GPU machine without network lacks to build
# the project against its own PyTorch's LibTorch (scripts/gpu/README.md):
# the headers, libraries and code generators of every Debian package the
# build here used, except LibTorch and the C/C++ runtime the GPU machine
# has. The packages are downloaded with apt-get download at the versions
# installed here, unpacked, and reduced to the files a finished build here
# read (ninja's header dependencies, the link lines, the programs' shared
# libraries, protoc and grpc_cpp_plugin) plus their CMake and pkg-config
# files. Writes KIT_DIR/deps.tar.xz and KIT_DIR/MANIFEST, prints the bytes
# that will travel (the working tree and the kit) and fails over the limit.
#
#   scripts/gpu/make_kit.sh
#
#   BUILD_DIR (build)   a finished build of this checkout (scripts/test.sh)
#   KIT_DIR (.gpu-kit)  the folder to carry; git ignores it
#   LIMIT_MIB (64)      what may travel to the GPU machine, working tree and kit
#   WHOLE_HEADERS (0)   1: every header of the packages but Boost's, not only
#                       those the build here read (about 1 MiB more)
#   ICU_ITEMS           the items of ICU's data the kit's libicudata keeps
#                       (below; ICU_ITEMS=all keeps the whole 31 MB)
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR=${BUILD_DIR:-build}
KIT_DIR=${KIT_DIR:-.gpu-kit}
LIMIT_MIB=${LIMIT_MIB:-64}
WHOLE_HEADERS=${WHOLE_HEADERS:-0}
ICU_ITEMS=${ICU_ITEMS:-nfkc.nrm unames.icu uemoji.icu ulayout.icu}

# Packages the GPU machine brings itself: its C library and compiler
# runtime, and PyTorch's LibTorch (with its BLAS and OpenMP) in place of
# Debian's, with what only Debian's LibTorch headers pull in (glog, gflags,
# libunwind) and what only the development packages' dependencies bring
# (Kerberos for the C library's RPC, ICU's data tools).
SKIP_PACKAGES='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libnsl.*|libtirpc.*)$'
SKIP_PACKAGES+='|^(gcc|g\+\+|cpp)(-[0-9]+)?$|^(libstdc\+\+|libgcc|libgomp|libasan|libtsan|libubsan|liblsan|libitm|libquadmath|libatomic|libcc1|libhwasan)'
SKIP_PACKAGES+='|^(binutils|libbinutils|libctf|libgprofng|libisl|libmpc|libmpfr|libgmp|libjansson)'
SKIP_PACKAGES+='|^(libtorch|python3|libpython|libopenblas|libblas|liblapack|libomp|libc10|libllvm)'
SKIP_PACKAGES+='|^(libgoogle-glog|libgflags|libunwind|liblzma|gcc-[0-9]+-base|rpcsvc-proto|icu-devtools)'
SKIP_PACKAGES+='|^(libkrb5|libgssapi|libk5crypto|libcom-err|libkeyutils)'

die() { echo "make_kit: $*" >&2; exit 1; }

[ -f "$BUILD_DIR/build.ninja" ] || die "$BUILD_DIR holds no build; run scripts/test.sh (or cmake and ninja) first"
# grep reads to the end (not -q): under pipefail, a writer that grep -q
# left early fails with SIGPIPE, at random.
ninja -C "$BUILD_DIR" -n 2>/dev/null | grep "no work to do" > /dev/null ||
  die "$BUILD_DIR is not up to date; finish it with ninja -C $BUILD_DIR"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. The headers under /usr the build read, the libraries on its link lines
# that come with them, and what those and the code generators need at run
# time, followed library by library but not into the skipped packages
# (Debian's LibTorch alone needs some hundred libraries: none of them is
# the kit's).
owners() {
  xargs dpkg -S 2>/dev/null | cut -d: -f1 | tr ',' '\n' | sed 's/^ *//; s/:amd64$//' | sort -u
}
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
# skipped PATH: whether PATH's package (under either of merged /usr's
# names) is one the kit leaves out.
skipped() {
  local bare=${1#/usr}
  dpkg -S "$bare" "/usr$bare" 2>/dev/null | cut -d: -f1 | grep -E "$SKIP_PACKAGES" > /dev/null
}
shared_libraries() {
  local queue=("$@") seen=" " lib soname path
  ldconfig -p | awk '/x86-64/ {print $1, $NF}' > "$work/ldcache"
  while [ "${#queue[@]}" -gt 0 ]; do
    lib=${queue[0]}
    queue=("${queue[@]:1}")
    for soname in $(needed "$lib"); do
      case "$seen" in *" $soname "*) continue ;; esac
      seen+="$soname "
      path=$(awk -v s="$soname" '$1 == s {print $2; exit}' "$work/ldcache")
      if [ -z "$path" ] || skipped "$path"; then continue; fi
      echo "$path"
      queue+=("$path")
    done
  done
}
used_files() {
  ninja -C "$BUILD_DIR" -t deps | awk '$1 ~ /^\/usr\// {print $1}' | sort -u > "$work/headers"
  # The headers' packages and the libraries those depend on: a link line's
  # library counts only from these.
  owners < "$work/headers" | grep -vE "$SKIP_PACKAGES" > "$work/header_owners" || true
  xargs -a "$work/header_owners" apt-cache depends --installed 2>/dev/null |
    sed -n 's/^ *Depends: \([a-z0-9][^ ]*\)$/\1/p' | sed 's/:amd64$//' |
    cat - "$work/header_owners" | sort -u > "$work/allowed"
  cat "$work/headers"
  local linked=() p
  while read -r p; do
    if grep -qxF "$(echo "$p" | owners | head -n 1)" "$work/allowed"; then linked+=("$p"); fi
  done < <(ninja -C "$BUILD_DIR" -t commands | tr -s ' ;' '\n' |
    grep -E '^/(usr/)?lib/[^ ]+\.(so|a)(\.[0-9.]+)?$' | sort -u)
  for p in protoc grpc_cpp_plugin pkg-config; do linked+=("$(readlink -f "$(command -v "$p")")"); done
  printf '%s\n' "${linked[@]}"
  shared_libraries "${linked[@]}"
}
echo "make_kit: reading what $BUILD_DIR used"
used_files | sort -u > "$work/listed"
# The real files behind every link, under both of merged /usr's names.
while read -r f; do
  for g in "$f" "$(readlink -f "$f")"; do
    g=${g#/}
    echo "/${g#usr/}"
    echo "/usr/${g#usr/}"
  done
done < "$work/listed" | sort -u > "$work/used"

# 2. The packages those files come from, at the installed versions, and
# the development packages those depend on (gRPC's CMake files look for
# c-ares and RE2 too).
owners < "$work/used" | grep -vE "$SKIP_PACKAGES" > "$work/owners" || true
[ -s "$work/owners" ] || die "found no Debian package behind the build's files"
# Each development package's development dependencies, followed, and the
# libraries their development links name, not followed (libcurl's own
# needs play no part in finding it).
dev_dependencies() {
  local queue seen=" " p d
  mapfile -t queue < <(grep -- '-dev$' "$work/owners")
  while [ "${#queue[@]}" -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    for d in $(apt-cache depends --installed --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances "$p" 2>/dev/null | sed -n 's/^ *Depends: \([a-z0-9].*\)/\1/p'); do
      d=${d%:amd64}
      case "$seen" in *" $d "*) continue ;; esac
      seen+="$d "
      echo "$d"
      case "$d" in *-dev) queue+=("$d") ;; esac
    done
  done
}
dev_dependencies | cat - "$work/owners" | sort -u | grep -vE "$SKIP_PACKAGES" > "$work/packages" || true
mkdir -p "$work/debs" "$work/root"
echo "make_kit: downloading $(wc -l < "$work/packages") packages"
# The installed version where Debian still serves it, else the current one
# (the kit is built from its own headers and libraries, so it only needs to
# agree with itself).
# shellcheck disable=SC2016  # dpkg-query's format, not the shell's
xargs -a "$work/packages" dpkg-query -W -f='${Package}=${Version}\n' > "$work/installed"
while read -r wanted; do
  (cd "$work/debs" && { apt-get download -qq "$wanted" 2>/dev/null || apt-get download -qq "${wanted%%=*}"; }) ||
    die "apt-get download ${wanted%%=*} failed: the machine needs Debian's package servers"
done < "$work/installed"
# shellcheck disable=SC2016
for deb in "$work"/debs/*.deb; do dpkg-deb -W --showformat='${Package}=${Version}\n' "$deb"; done > "$work/versions"
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
# Merged /usr: what a package installs under /lib lives under /usr/lib.
if [ -d "$work/root/lib" ] && [ ! -L "$work/root/lib" ]; then
  cp -a "$work/root/lib/." "$work/root/usr/lib/"
  rm -rf "$work/root/lib"
fi

# 3. Keep the packages' programs, CMake and pkg-config files, and of their
# headers and libraries those the build used (both machines compile the
# same sources; WHOLE_HEADERS=1 keeps every header but Boost's 170 MB), and
# the headers CMake's FindProtobuf and FindCURL and gRPC's CMake files look for. CMake stops when an imported target's library is missing, even one
# nothing links (gRPC's unsecure and reflection libraries, say), so the kit's
# CMake files check only the libraries it holds. libcurl stays for
# prometheus-cpp's CMake file, which looks for it (its push client) though
# nothing links it.
(cd "$work/root" && find usr \( -type f -o -type l \)) | sort > "$work/unpacked"
readlink -f /usr/lib/x86_64-linux-gnu/libcurl.so >> "$work/used"
awk -v whole="$WHOLE_HEADERS" 'NR == FNR {used[$1]; next}
     $1 ~ /^usr\/share\/(doc|man|info|lintian|bug)\// {next}
     $1 ~ /^usr\/include\// && whole == 1 && $1 !~ /^usr\/include\/boost\// {print; next}
     $1 ~ /^usr\/include\/(x86_64-linux-gnu\/)?(curl\/|re2\/|ares[^\/]*\.h$|google\/protobuf\/service\.h$)/ {print; next}
     $1 ~ /^usr\/include\// || $1 ~ /\.(a|so[0-9.]*)$/ {if (("/" $1) in used) print; next}
     $1 ~ /^usr\/(bin|include|lib)\// || $1 ~ /^usr\/share\/(cmake|pkgconfig|protobuf)/ {print}' \
  "$work/used" "$work/unpacked" > "$work/kept"
# A kept library's links keep their names (libfoo.so -> libfoo.so.1 -> libfoo.so.1.2).
(cd "$work/root" && find usr -type l -name '*.so*') | while read -r link; do
  target=$(readlink -f "$work/root/$link")
  if grep -qxF "${target#"$work"/root/}" "$work/kept"; then echo "$link"; fi
done > "$work/links"
sort -u -o "$work/kept" "$work/kept" "$work/links"
grep -E '/cmake/.*[Tt]argets-[a-z]+\.cmake$' "$work/kept" | while read -r targets; do
  awk 'NR == FNR {n = split($1, part, "/"); kept[part[n]]; next}
    tolower($0) ~ /import_check_files_for_/ && match($0, /lib[^"\/]*\.(so|a)[0-9.]*"/) {
      if (!(substr($0, RSTART, RLENGTH - 1) in kept)) next
    }
    {print}' "$work/kept" "$work/root/$targets" > "$work/pruned" && cp "$work/pruned" "$work/root/$targets"
done

# pkg-config files name /usr; make them name the folder they sit in. (Debian
# 12's hiredis.pc names /usr/lib, not the multiarch folder its library is in.)
while read -r pc; do
  if [ ! -f "$work/root/$pc" ] || [ -L "$work/root/$pc" ]; then continue; fi
  depth=$(echo "${pc%/*}" | tr -cd / | wc -c)
  up=$(printf '/..%.0s' $(seq 1 "$((depth + 1))"))
  grep -q '^prefix=' "$work/root/$pc" || sed -i '1i prefix=/usr' "$work/root/$pc"  # re2.pc has none
  # shellcheck disable=SC2016  # pkg-config's variables, not the shell's
  sed -i -e "s|^prefix=/usr\$|prefix=\${pcfiledir}${up}/usr|" \
    -e 's|^\([a-z_]*\)=/usr/|\1=${prefix}/|' \
    -e 's|^libdir=${prefix}/lib$|libdir=${prefix}/lib/x86_64-linux-gnu|' "$work/root/$pc"
done < <(grep '\.pc$' "$work/kept")

# ICU's data library is 31 MB, 7.4 of the kit's packed MiB, nearly all of it
# locale data nothing here reads. The project uses ICU for normalization and
# regular expressions, whose data is in ICU's common library but for NFKC's
# tables (nfkc.nrm), character names (unames.icu, a regex's \N{...}) and the
# emoji and layout properties (uemoji.icu, ulayout.icu). The kit's
# libicudata holds those items alone, under the same name and symbol, and is
# checked here by the tokenizer tests, which fail without any of them.
reduce_icu_data() {
  local lib prefix soname dir="$work/icu" tests="$BUILD_DIR/tests/model_tests"
  lib=$(grep -m 1 -E '^usr/lib/x86_64-linux-gnu/libicudata\.so\.[0-9]+\.[0-9.]+$' "$work/kept") || return 0
  [ -x "$tests" ] || die "$tests is missing: build the tests to check ICU's reduced data"
  prefix=$(nm -D --defined-only "$work/root/$lib" | awk '$3 ~ /^icudt[0-9]+_dat$/ {sub(/_dat$/, "", $3); print $3}')
  soname=$(readelf -d "$work/root/$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  if [ -z "$prefix" ] || [ -z "$soname" ]; then die "$lib: no ICU data symbol or soname"; fi
  mkdir -p "$dir/items.d" "$dir/package" "$dir/lib"
  # The data is the library's read-only section; icupkg checks its header
  # and takes a list of items from a file whose name ends in .txt.
  objcopy -O binary --only-section=.rodata "$work/root/$lib" "$dir/${prefix}l.dat"
  tr -s ' ' '\n' <<< "$ICU_ITEMS" | grep . > "$dir/items.txt"
  icupkg -x "$dir/items.txt" -d "$dir/items.d" "$dir/${prefix}l.dat" > /dev/null
  icupkg -a "$dir/items.txt" -s "$dir/items.d" new "$dir/package/${prefix}l.dat" > /dev/null
  genccode --assembly gcc -e "$prefix" -d "$dir" "$dir/package/${prefix}l.dat" > /dev/null
  gcc -shared -Wl,-soname,"$soname" -o "$dir/lib/$soname" "$dir/${prefix}l_dat.S"
  LD_LIBRARY_PATH="$dir/lib" ldd "$tests" | grep "libicudata.* => $dir/lib/" > /dev/null ||
    die "$tests does not load ICU's data from $dir/lib (an RPATH?): the check would prove nothing"
  LD_LIBRARY_PATH="$dir/lib" "$tests" --gtest_brief=1 \
    --gtest_filter='Tokenizer*:BytesTokenizer*:ChatTemplate*' > "$dir/check.log" 2>&1 ||
    die "the tokenizer tests fail on ICU's data reduced to $ICU_ITEMS: $(grep -m 3 -E 'Failure|FAILED' "$dir/check.log" | tr '\n' ' ')"
  cp "$dir/lib/$soname" "$work/root/$lib"
  echo "make_kit: ICU's data reduced to $ICU_ITEMS ($(stat -c %s "$work/root/$lib") bytes)"
}
[ "$ICU_ITEMS" = all ] || reduce_icu_data

# 4. Pack, list and size.
mkdir -p "$KIT_DIR"
{
  echo "# made by scripts/gpu/make_kit.sh on $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD)"
  echo "# $(wc -l < "$work/kept") files from these packages:"
  cat "$work/versions"
} > "$KIT_DIR/MANIFEST"
tar -C "$work/root" -cf - -T "$work/kept" | xz -T0 -9 > "$KIT_DIR/deps.tar.xz"
unpacked=$(xz -dc "$KIT_DIR/deps.tar.xz" | wc -c)
kit=$(stat -c %s "$KIT_DIR/deps.tar.xz")
tree=$(git ls-files -co --exclude-standard -z | xargs -0 du -cb --apparent-size 2>/dev/null |
  tail -1 | cut -f1)
limit=$((LIMIT_MIB * 1024 * 1024))
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "make_kit: $(wc -l < "$work/kept") files, $(mib "$unpacked") unpacked, $(mib "$kit") packed in $KIT_DIR/deps.tar.xz"
echo "make_kit: travels: working tree $(mib "$tree") + $KIT_DIR $(mib "$((kit + $(stat -c %s "$KIT_DIR/MANIFEST")))") = $(mib "$((tree + kit))") of $(mib "$limit")"
[ "$((tree + kit))" -le "$limit" ] ||
  die "over the limit by $(mib "$((tree + kit - limit))"): carry less (see scripts/gpu/README.md)"
