/**
 * The words after a restore in place (restoreNoticeText.ts): the count of changed cells,
 * the checkpoint's name, and the server's `cells_note` when the answer carries one.
 */

import { restoreNoticeText } from '../src/restoreNoticeText';

/** `_n` as `nullTranslator` does it: singular or plural, %1 and %2 filled in. */
const trans = {
  _n: (singular: string, plural: string, count: number, ...args: unknown[]): string =>
    [count, ...args].reduce<string>(
      (text, arg, i) => text.replace(`%${i + 1}`, String(arg)),
      count === 1 ? singular : plural
    )
};

describe('restoreNoticeText', () => {
  it('counts the changed cells and names the checkpoint', () => {
    expect(restoreNoticeText(trans, 7, 'after-5', null)).toBe(
      '7 cells changed since checkpoint after-5.'
    );
    expect(restoreNoticeText(trans, 1, 'after-5', undefined)).toBe(
      '1 cell changed since checkpoint after-5.'
    );
  });

  it("adds the server's note on the comparison when it has one", () => {
    const note = 'The cells were aligned in order.';
    expect(restoreNoticeText(trans, 2, 'after-5', note)).toBe(
      `2 cells changed since checkpoint after-5. ${note}`
    );
  });
});
