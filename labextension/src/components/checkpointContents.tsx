/**
 * Two sections of a checkpoint's details: what it holds (its variables with type,
 * summary, size and whether each could be kept; its files' count and bytes; its
 * document's cells), and what changed since its parent (a short list, with the whole
 * comparison one click away in the Compare view).
 */

import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { ICheckpointContents, ICheckpointSummary, IDiffResult, IVariable } from '../apiTypes';
import { formatBytes, shortId } from '../format';
import { Loaded } from '../state/checkpointInfo';
import { VirtualList } from './virtualList';

/** Height of a variable's row in the details, in pixels. */
const VARIABLE_ROW_HEIGHT = 22;

/** Variable rows shown before the list scrolls. */
const VISIBLE_VARIABLES = 8;

/** Items of each kind the Changes section names before "and N more". */
const CHANGES_SHOWN = 5;

/** Props of the two sections. */
interface ISectionProps<T> {
  loaded: Loaded<T>;
  trans: TranslationBundle;
  /** Read it again (after a failure). */
  onRetry: () => void;
}

function Pending<T>(props: ISectionProps<T>): JSX.Element | null {
  const { loaded, trans } = props;
  if (loaded.state === 'loading') {
    return <div className="jp-DittoDetails-loading">{trans.__('Loading…')}</div>;
  }
  if (loaded.state === 'failed') {
    return (
      <div className="jp-DittoDetails-error" role="alert">
        {loaded.error}{' '}
        <button className="jp-DittoLink" onClick={props.onRetry}>
          {trans.__('Retry')}
        </button>
      </div>
    );
  }
  return null;
}

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

function VariableList(props: { variables: IVariable[]; trans: TranslationBundle }): JSX.Element {
  const { variables, trans } = props;
  const height = Math.min(variables.length, VISIBLE_VARIABLES) * VARIABLE_ROW_HEIGHT;
  return (
    <VirtualList
      className="jp-DittoVariables"
      role="list"
      ariaLabel={trans.__('Variables')}
      count={variables.length}
      rowHeight={VARIABLE_ROW_HEIGHT}
      height={height}
      renderRow={(index, style) => {
        const v = variables[index];
        const size = v.size === null ? '' : formatBytes(v.size);
        return (
          <div
            key={v.name}
            role="listitem"
            aria-posinset={index + 1}
            aria-setsize={variables.length}
            aria-label={[
              v.name,
              v.type,
              v.summary,
              size,
              v.kept ? null : trans.__('not kept: %1', v.reason ?? '')
            ]
              .filter(Boolean)
              .join(', ')}
            className={`jp-DittoVariable${v.kept ? '' : ' jp-mod-lost'}`}
            style={style}
          >
            <code className="jp-DittoVariable-name">{v.name}</code>
            <span className="jp-DittoVariable-type" title={v.type}>
              {shortType(v.type)}
            </span>
            <span className="jp-DittoVariable-summary" title={v.summary}>
              {v.summary}
            </span>
            <span className="jp-DittoVariable-size">{size}</span>
            {v.kept ? null : (
              <span className="jp-DittoBadge jp-mod-warn" title={v.reason ?? ''}>
                {trans.__('not kept')}
              </span>
            )}
          </div>
        );
      }}
    />
  );
}

/** "pandas.core.frame.DataFrame" -> "DataFrame"; the full name is the title. */
function shortType(type: string): string {
  const parts = type.split('.');
  return parts[parts.length - 1] || type;
}

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

function ChangeLines(props: {
  label: string;
  items: string[];
  trans: TranslationBundle;
}): JSX.Element {
  const { label, items, trans } = props;
  const shown = items.slice(0, CHANGES_SHOWN);
  return (
    <div className="jp-DittoChanges-kind">
      <span className="jp-DittoChanges-label">{label}</span>{' '}
      {items.length === 0 ? (
        <span className="jp-DittoChanges-none">{trans.__('no changes')}</span>
      ) : (
        <ul className="jp-DittoChanges-list">
          {shown.map(item => (
            <li key={item} className="jp-DittoMono" title={item}>
              {item}
            </li>
          ))}
          {items.length > shown.length ? (
            <li className="jp-DittoChanges-more">
              {trans.__('and %1 more', items.length - shown.length)}
            </li>
          ) : null}
        </ul>
      )}
    </div>
  );
}
