/**
 * What the panel says of a retention thinning (thinnedText.ts).
 */

import { IThinned } from '../src/apiTypes';
import { cellSpansText, thinnedReason, thinnedText } from '../src/thinnedText';

const thinned: IThinned = {
  rules: ['tiers', 'budget'],
  checkpoints: 4,
  cells: [
    { first: 2, last: 2 },
    { first: 4, last: 6 }
  ],
  checkpoint_ids: ['a', 'b', 'c', 'd'],
  bytes_freed: 1.5 * 1024 * 1024
};

describe('thinnedText', () => {
  it('says how many, after which cells, and the bytes freed', () => {
    expect(cellSpansText(thinned.cells)).toBe('2, 4–6');
    expect(thinnedText(thinned)).toBe(
      'Thinned 4 automatic checkpoints (cells 2, 4–6): 1.5 MiB freed.'
    );
  });

  it('leaves out what it does not know', () => {
    const keep: IThinned = { ...thinned, rules: ['keep'], checkpoints: 1, bytes_freed: null };
    expect(thinnedText({ ...keep, cells: [] })).toBe('Thinned 1 automatic checkpoint.');
    expect(thinnedReason(keep)).toContain('Why: %autocheckpoint --keep.');
  });

  it('says why, and what is never thinned', () => {
    const reason = thinnedReason(thinned);
    expect(reason).toContain('over its byte budget');
    expect(reason).toContain('never thinned');
  });
});
