#!/usr/bin/env bash
# Rebuild docs/findings.md and docs/findings/ from a results database (nothing here is typed by hand
# except docs/findings-reading.md, the short reading paragraph that opens the page).
#
#   bash docs/make_findings.sh /path/to/results.db /path/to/runs [scale]
#
# Runs `cemctl claims` and `cemctl report` for every cpu-scale figure grid, then assembles the page:
# the reading paragraph, the claims document cemctl wrote, and a link to each figure's report.
set -euo pipefail

DB="${1:?results database}"
RUNS="${2:?runs folder}"
SCALE="${3:-cpu}"
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="$HERE/findings"
CEMCTL=(python3 -m cemctl.cli)

mkdir -p "$OUT"
"${CEMCTL[@]}" claims --scale "$SCALE" --db "$DB" --runs-dir "$RUNS" --out "$OUT/claims"
reports=()
for exp in fig2a fig2b fig2c fig2d fig3a fig3b fig3c fig4 t2_ablation; do
  if "${CEMCTL[@]}" report "$exp" --scale "$SCALE" --db "$DB" --runs-dir "$RUNS" --format png \
       --out "$OUT/$exp" >/dev/null 2>"$OUT/.report-$exp.err"; then
    reports+=("$exp")
  else
    echo "report $exp: $(tail -1 "$OUT/.report-$exp.err")" >&2
  fi
  rm -f "$OUT/.report-$exp.err"
done

{
  echo "# Findings at the \`$SCALE\` scale"
  echo
  cat "$HERE/findings-reading.md"
  echo
  # The claims document, its heading dropped and its figure path made relative to docs/.
  tail -n +2 "$OUT/claims/claims.md" \
    | sed -e 's#](claims.png)#](findings/claims/claims.png)#' -e 's#in `claims.csv`#in [claims.csv](findings/claims/claims.csv)#'
  echo
  echo "## The figures, one report per grid"
  echo
  echo "Each figure as \`cemctl report\` drew it (the report beside it holds the tables, the runs and the captions)."
  for exp in "${reports[@]}"; do
    echo
    echo "### $exp ([report](findings/$exp/index.md))"
    echo
    for fig in "$OUT/$exp"/figures/*.png; do
      [ "$(basename "$fig")" = training_curves.png ] && continue
      echo "![$exp $(basename "$fig" .png)](findings/$exp/figures/$(basename "$fig"))"
    done
  done
} > "$HERE/findings.md"
echo "wrote $HERE/findings.md"
