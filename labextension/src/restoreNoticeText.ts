/**
 * What the panel and the notification say after a restore in place whose checkpoint's
 * cells differ from the open notebook's (cellActions.ts), with the server's note on the
 * comparison when it has one (`cells_note` of the restore answer).
 */

import type { TranslationBundle } from '@jupyterlab/translation';

/** "7 cells changed since checkpoint after-5." and the server's note, if any. */
export function restoreNoticeText(
  trans: Pick<TranslationBundle, '_n'>,
  count: number,
  label: string,
  note: string | null | undefined
): string {
  const text = trans._n(
    '%1 cell changed since checkpoint %2.',
    '%1 cells changed since checkpoint %2.',
    count,
    label
  );
  return note ? `${text} ${note}` : text;
}
