/**
 * A section of a checkpoint's details: what changed since its parent (a short list, with
 * the whole comparison one click away in the Compare view).
 */

import * as React from 'react';

import { IDiffResult } from '../apiTypes';
import { shortId } from '../format';
import { ChangeLines } from './changeLines';
import { ISectionProps, Pending } from './pending';

/** What changed since the parent, in short. */
export function ChangesSection(
  props: ISectionProps<IDiffResult> & { parentId: string; onShowAll: () => void }
): JSX.Element {
  const { loaded, trans, parentId } = props;
  const diff = loaded.state === 'loaded' ? loaded.value : null;
  return (
    <div className="jp-DittoDetails-changes" aria-label={trans.__('Changes since the parent')}>
      <div className="jp-DittoDetails-subtitle">
        {trans.__('Changes since %1', diff?.from.label ?? shortId(parentId))}
      </div>
      <Pending {...props} />
      {diff ? (
        <>
          <ChangeLines
            label={trans.__('Variables')}
            items={[
              ...diff.variables.added.map(v => `+ ${v.name}  ${v.summary}`),
              ...diff.variables.removed.map(v => `− ${v.name}`),
              ...diff.variables.changed.map(c => `~ ${c.name}  ${c.old.summary} → ${c.new.summary}`)
            ]}
            trans={trans}
          />
          <ChangeLines
            label={trans.__('Files')}
            items={[
              ...diff.files.added.map(f => `+ ${f.path}`),
              ...diff.files.removed.map(f => `− ${f.path}`),
              ...diff.files.changed.map(f => `~ ${f.path}`)
            ]}
            trans={trans}
          />
          <div className="jp-DittoChanges-kind">
            <span className="jp-DittoChanges-label">{trans.__('Cells')}</span>{' '}
            {diff.cells.available
              ? trans.__(
                  '%1 added, %2 removed, %3 changed',
                  diff.cells.added.length,
                  diff.cells.removed.length,
                  diff.cells.changed.length
                )
              : trans.__('not compared (no notebook on one side)')}
          </div>
          <button
            className="jp-DittoLink"
            aria-label={trans.__('Show all changes since %1', diff.from.label)}
            onClick={props.onShowAll}
          >
            {trans.__('Show all changes')}
          </button>
        </>
      ) : null}
    </div>
  );
}
