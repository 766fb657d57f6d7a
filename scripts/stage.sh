# Sourced by test.sh and tsan.sh: `stage NAME COMMAND...` runs COMMAND
# between "=== NAME" and "=== NAME: <seconds> s", so CI logs show where the
# time goes.
stage() {
  local name=$1
  shift
  local t0
  t0=$(date +%s)
  echo "=== ${name}"
  "$@"
  echo "=== ${name}: $(( $(date +%s) - t0 )) s"
}

# `fresh_generator DIR` prints "-G Ninja" when CMake has not configured DIR
# yet, and nothing when it has (a directory keeps the generator it was made
# with). Ninja schedules every compile of the tree at once, where Make's
# builds of a target wait for the libraries it links.
fresh_generator() {
  [ -f "$1/CMakeCache.txt" ] || echo "-G Ninja"
}
