/**
 * What the panel says of a retention thinning of a runtime's automatic checkpoints (a
 * `thin` event): how many, after which cells, the bytes freed, and why.
 */

import type { ICellSpan, IThinned } from './apiTypes';
import { formatBytes, Translate, untranslated } from './format';

/** [2-2, 4-6] -> "2, 4–6". */
export function cellSpansText(cells: ICellSpan[]): string {
  return cells
    .map(span => (span.first === span.last ? `${span.first}` : `${span.first}–${span.last}`))
    .join(', ');
}

/** "Thinned 4 automatic checkpoints (cells 2, 4–6): 1.2 MiB freed." */
export function thinnedText(thinned: IThinned, t: Translate = untranslated): string {
  const count =
    thinned.checkpoints === 1
      ? t('Thinned 1 automatic checkpoint')
      : t('Thinned %1 automatic checkpoints', thinned.checkpoints);
  const cells = thinned.cells.length ? t(' (cells %1)', cellSpansText(thinned.cells)) : '';
  const freed =
    typeof thinned.bytes_freed === 'number' && thinned.bytes_freed > 0
      ? t(': %1 freed', formatBytes(thinned.bytes_freed))
      : '';
  return `${count}${cells}${freed}.`;
}

/** Why, for the line's tooltip: the rules that chose. */
export function thinnedReason(thinned: IThinned, t: Translate = untranslated): string {
  const reasons = thinned.rules.map(rule =>
    rule === 'tiers'
      ? t('kept by none of the age tiers (every cell of the last hour, fewer as they age)')
      : rule === 'budget'
        ? t('the data directory was over its byte budget (oldest first)')
        : t('%autocheckpoint --keep')
  );
  return t(
    'Their rows stay in the tree, without variables or files. Why: %1. Named checkpoints, heads, checkout sources, before-*, lost and idle-pause checkpoints are never thinned.',
    reasons.join('; ')
  );
}
