/**
 * After a restore in place whose checkpoint's cells differ from the open notebook's: how
 * many (and the server's note), with "Show changes", "Bring cells back" and Dismiss.
 */

import * as React from 'react';

import { CommandIDs } from '../commandIds';
import { checkpointLabelIn } from '../format';
import { restoreNoticeText } from '../restoreNoticeText';
import { IRuntimeItemProps } from './panelProps';

/** After a restore: how many cells differ, and the two actions. */
export function RestoreNotice(props: IRuntimeItemProps): JSX.Element | null {
  const { state, commands, trans, runtime } = props;
  const id = runtime.runtime_id;
  const notice = state.restoreNotice(id);
  if (!notice) {
    return null;
  }
  const args = { runtimeId: id, checkpointId: notice.checkpointId };
  const label = checkpointLabelIn(state.cache, notice.checkpointId);
  return (
    <div className="jp-DittoNotice" role="status" aria-label={trans.__('After the restore')}>
      <span className="jp-DittoNotice-text">
        {restoreNoticeText(trans, notice.cellsChanged, label, notice.cellsNote)}{' '}
        {trans.__('The notebook was left as it is.')}
      </span>
      <span className="jp-DittoNotice-actions">
        <button
          className="jp-DittoButton jp-mod-styled"
          aria-label={trans.__('Show the changes since %1', label)}
          onClick={() => void commands.execute(CommandIDs.showCellChanges, args)}
        >
          {trans.__('Show changes')}
        </button>
        <button
          className="jp-DittoButton jp-mod-styled jp-DittoButton-danger"
          aria-label={trans.__('Bring the cells of %1 back', label)}
          onClick={() => void commands.execute(CommandIDs.bringCellsBack, args)}
        >
          {trans.__('Bring cells back')}
        </button>
        <button
          className="jp-DittoIconButton jp-DittoNotice-dismiss"
          aria-label={trans.__('Dismiss')}
          title={trans.__('Dismiss')}
          onClick={() => state.setRestoreNotice(id, null)}
        >
          ×
        </button>
      </span>
    </div>
  );
}
