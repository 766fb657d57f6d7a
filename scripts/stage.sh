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
