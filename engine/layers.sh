#!/bin/sh
# The engine's layering rule, checked (./build.sh test runs it):
#
#   serve -> decode, template, text -> model -> kernels -> base
#
# A file may include headers of its own folder and of the folders below
# it, never above; decode, template and text sit side by side (decode
# uses text's tokenizer; neither template nor text uses decode).  Only
# serve/ speaks the wire format: nothing else includes llm.pb-c.h.
# Prints each offending #include and exits 1, or prints a summary.
set -eu
cd "$(dirname "$0")/src"

# what each folder may include besides itself
allowed() {
    case $1 in
        base)     echo "" ;;
        kernels)  echo "base" ;;
        model)    echo "kernels base" ;;
        text)     echo "model kernels base" ;;
        template) echo "base" ;;
        decode)   echo "text model kernels base" ;;
        serve)    echo "decode template text model kernels base" ;;
        *)        echo "?" ;;
    esac
}

bad=0
n=0
for f in */*.[ch]; do
    dir=${f%%/*}
    ok=$(allowed "$dir")
    if [ "$ok" = "?" ]; then
        echo "$f: folder $dir is not in the layer list (engine/layers.sh)"
        bad=1
        continue
    fi
    # "folder/file.h" includes
    for inc in $(sed -n 's/^#include "\([a-z_]*\)\/[^"]*".*/\1/p' "$f"); do
        n=$((n + 1))
        [ "$inc" = "$dir" ] && continue
        case " $ok " in
            *" $inc "*) ;;
            *) echo "$f: includes $inc/ (layer $dir may use: ${ok:-nothing})"
               bad=1 ;;
        esac
    done
    if [ "$dir" != serve ] && grep -q '^#include "llm\.pb-c\.h"' "$f"; then
        echo "$f: includes the protobuf header outside serve/"
        bad=1
    fi
done
[ $bad = 0 ] && echo "engine layers: $n cross-folder includes, all downward"
exit $bad
