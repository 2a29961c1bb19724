#!/bin/sh
# Generate libni's pkg-config file from ni.pc.in.
#
#   libni/gen-pc.sh PREFIX LIBDIR INCLUDEDIR [VERSION] > ni.pc
#
# LIBDIR holds libni.so / libni.a (e.g. target/release), INCLUDEDIR holds ni.h (libni/include).
# VERSION defaults to the workspace version in Cargo.toml. Then
#   PKG_CONFIG_PATH=$(dirname ni.pc) pkg-config --cflags --libs ni
# prints the flags to build against libni (add --static for libni.a).
set -eu

if [ $# -lt 3 ] || [ $# -gt 4 ]; then
    echo "usage: $0 PREFIX LIBDIR INCLUDEDIR [VERSION] > ni.pc" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
template="$here/ni.pc.in"

version=${4:-}
if [ -z "$version" ]; then
    # The first `version = "..."` of the workspace manifest ([workspace.package]).
    version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$here/../Cargo.toml" | head -n 1)
fi
[ -n "$version" ] || version=0.0.0

for v in "$1" "$2" "$3" "$version"; do
    case $v in
    *'
'*)
        echo "$0: arguments may not contain newlines" >&2
        exit 2
        ;;
    esac
done

# Escape for the replacement side of a sed s|||: backslash, ampersand and the delimiter.
esc() { printf '%s' "$1" | sed -e 's/[\\&|]/\\&/g'; }

sed -e "s|@PREFIX@|$(esc "$1")|g" \
    -e "s|@LIBDIR@|$(esc "$2")|g" \
    -e "s|@INCLUDEDIR@|$(esc "$3")|g" \
    -e "s|@VERSION@|$(esc "$version")|g" \
    "$template"
