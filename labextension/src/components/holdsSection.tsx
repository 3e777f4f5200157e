/**
 * A section of a checkpoint's details: what it holds (its variables with type, summary,
 * size and whether each could be kept; its files' count and bytes; its document's cells).
 */

import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { ICheckpointContents, ICheckpointSummary } from '../apiTypes';
import { formatBytes } from '../format';
import { ISectionProps, Pending } from './pending';
import { VariableList } from './variableList';

/** What the checkpoint holds. */
export function HoldsSection(
  props: ISectionProps<ICheckpointContents> & { checkpoint: ICheckpointSummary }
): JSX.Element {
  const { loaded, trans, checkpoint } = props;
  const contents = loaded.state === 'loaded' ? loaded.value : null;
  return (
    <div className="jp-DittoDetails-holds" aria-label={trans.__('What the checkpoint holds')}>
      <div className="jp-DittoDetails-subtitle">{trans.__('Holds')}</div>
      <Pending {...props} />
      {contents ? (
        <>
          <dl className="jp-DittoDetails-fields">
            <dt>{trans.__('Variables')}</dt>
            <dd>{contents.variables.length}</dd>
            <dt>{trans.__('Files')}</dt>
            <dd>{filesText(contents.files, trans)}</dd>
            <dt>{trans.__('Notebook')}</dt>
            <dd>{documentText(contents, checkpoint, trans)}</dd>
          </dl>
          {contents.variables.length > 0 ? (
            <VariableList variables={contents.variables} trans={trans} />
          ) : null}
        </>
      ) : null}
    </div>
  );
}

function filesText(files: ICheckpointContents['files'], trans: TranslationBundle): string {
  if (files.count === null) {
    return trans.__('unknown (the snapshot cannot be read here)');
  }
  const bytes = files.bytes === null ? '' : `, ${formatBytes(files.bytes)}`;
  return trans._n('%1 file', '%1 files', files.count) + bytes;
}

function documentText(
  contents: ICheckpointContents,
  checkpoint: ICheckpointSummary,
  trans: TranslationBundle
): string {
  const source = checkpoint.document?.source;
  if (source === 'pending') {
    return trans.__('waiting for the notebook');
  }
  if (!contents.document) {
    return trans.__('none (taken without a notebook)');
  }
  const cells = trans._n('%1 cell', '%1 cells', contents.document.cells);
  switch (source) {
    case 'front_end':
    case 'request':
      return trans.__('%1, as shown in JupyterLab', cells);
    case 'saved_file':
      return trans.__('%1, from the saved file', cells);
    default:
      return cells;
  }
}
