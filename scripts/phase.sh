# Sourced: `phase "what" "about how long"` prints a banner with the time spent
# so far, so that a cold install or build is never silent for long. Each
# banner first says how long the step before it took, against what it said,
# so that the log keeps every step's time.
phase() {
  if [ -n "${phase_said:-}" ]; then
    local took=$((SECONDS - phase_started))
    printf -- '-- took %dm%02ds (said: %s)\n' $((took / 60)) $((took % 60)) "$phase_said" >&2
  fi
  printf '== %s (%s) [%dm%02ds so far]\n' "$1" "$2" $((SECONDS / 60)) $((SECONDS % 60)) >&2
  phase_said="$2"
  phase_started=$SECONDS
}
