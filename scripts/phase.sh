# Sourced: `phase "what" "about how long"` prints a banner with the time spent
# so far, so that a cold install or build is never silent for long.
phase() {
  printf '== %s (%s) [%dm%02ds so far]\n' "$1" "$2" $((SECONDS / 60)) $((SECONDS % 60)) >&2
}
