/**
 * The Compare view: what changed between two checkpoints of a runtime, or a checkpoint
 * and the live kernel, in a main-area tab. Variables added, removed and changed (old and
 * new summaries), files (with the text diff of small text files), cells (source diff,
 * outputs changed), as one windowed list (rows.ts), so a comparison of thousands
 * of files draws as fast as one of ten.
 */

import { ReactWidget } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import { caretDownIcon, caretRightIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { ICompareResult, IDiffResult } from '../apiTypes';
import { CompareGrid } from './compareGrid';
import { CompareRow, compareRows, expandableKeys, hasChanges, initiallyExpanded } from './rows';
import { VirtualList } from '../components/virtualList';

/** Height of one row of the Compare view, in pixels. */
export const COMPARE_ROW_HEIGHT = 24;

/** What the view shows: a comparison being read, read (of two, or of many sides), or failed. */
export type ComparisonState =
  | { status: 'loading'; title: string }
  | { status: 'loaded'; title: string; diff: IDiffResult }
  | { status: 'sides'; title: string; result: ICompareResult }
  | { status: 'failed'; title: string; error: string };

/** The content of the Compare tab; `setComparison` puts a new comparison in it. */
export class CompareWidget extends ReactWidget {
  constructor(private trans: TranslationBundle) {
    super();
    this.addClass('jp-DittoCompare');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', trans.__('Runtime compare'));
  }

  /** Show a comparison (or its loading, or its failure). */
  setComparison(state: ComparisonState): void {
    this._state = state;
    this._revision += 1;
    this.update();
  }

  get comparison(): ComparisonState | null {
    return this._state;
  }

  render(): JSX.Element | null {
    const state = this._state;
    if (state?.status === 'sides') {
      return (
        <CompareGrid
          key={this._revision}
          title={state.title}
          result={state.result}
          trans={this.trans}
        />
      );
    }
    return state ? <CompareView key={this._revision} state={state} trans={this.trans} /> : null;
  }

  private _state: ComparisonState | null = null;
  private _revision = 0;
}

interface ICompareViewProps {
  state: ComparisonState;
  trans: TranslationBundle;
}

function CompareView(props: ICompareViewProps): JSX.Element {
  const { state, trans } = props;
  const diff = state.status === 'loaded' ? state.diff : null;
  const [expanded, setExpanded] = React.useState<Set<string>>(() =>
    diff ? initiallyExpanded(diff) : new Set()
  );
  const [filter, setFilter] = React.useState('');
  const t = React.useCallback((m: string, ...a: (string | number)[]) => trans.__(m, ...a), [trans]);
  const rows = React.useMemo(
    () => (diff ? compareRows(diff, { expanded, filter, t }) : []),
    [diff, expanded, filter, t]
  );
  const toggle = (key: string): void => {
    const next = new Set(expanded);
    if (!next.delete(key)) {
      next.add(key);
    }
    setExpanded(next);
  };
  const allKeys = React.useMemo(() => (diff ? expandableKeys(diff) : []), [diff]);

  return (
    <div className="jp-DittoCompare-body">
      <div className="jp-DittoCompare-header">
        <h2 className="jp-DittoCompare-title">{state.title}</h2>
        {diff ? (
          <div className="jp-DittoCompare-sides">
            <span
              className="jp-DittoCompare-side jp-mod-from"
              title={diff.from.checkpoint_id ?? ''}
            >
              {diff.from.label}
            </span>
            {' → '}
            <span className="jp-DittoCompare-side jp-mod-to" title={diff.to.checkpoint_id ?? ''}>
              {diff.to.label}
            </span>
          </div>
        ) : null}
        {diff ? (
          <div className="jp-DittoCompare-tools">
            <input
              className="jp-DittoCompare-filter jp-mod-styled"
              type="search"
              placeholder={trans.__('Filter by name or path')}
              aria-label={trans.__('Filter the changes')}
              value={filter}
              onChange={event => setFilter(event.currentTarget.value)}
            />
            {allKeys.length > 0 ? (
              <>
                <button
                  className="jp-DittoButton jp-mod-styled"
                  aria-label={trans.__('Open every diff')}
                  onClick={() => setExpanded(new Set(allKeys))}
                >
                  {trans.__('Open all')}
                </button>
                <button
                  className="jp-DittoButton jp-mod-styled"
                  aria-label={trans.__('Close every diff')}
                  onClick={() => setExpanded(new Set())}
                >
                  {trans.__('Close all')}
                </button>
              </>
            ) : null}
          </div>
        ) : null}
      </div>
      {state.status === 'loading' ? (
        <div className="jp-DittoCompare-message" role="status">
          <span className="jp-DittoSpinner" aria-hidden="true" />
          {trans.__('Comparing…')}
        </div>
      ) : null}
      {state.status === 'failed' ? (
        <div className="jp-DittoCompare-message jp-mod-error" role="alert">
          {state.error}
        </div>
      ) : null}
      {diff && !hasChanges(diff) ? (
        <div className="jp-DittoCompare-message" role="status">
          {trans.__('No differences: the variables, files and cells are the same.')}
        </div>
      ) : null}
      {diff ? (
        <VirtualList
          className="jp-DittoCompare-list"
          role="list"
          ariaLabel={trans.__('Changes from %1 to %2', diff.from.label, diff.to.label)}
          count={rows.length}
          rowHeight={COMPARE_ROW_HEIGHT}
          renderRow={(index, style) => (
            <CompareRowView
              key={rows[index].key}
              row={rows[index]}
              index={index}
              count={rows.length}
              style={style}
              trans={trans}
              onToggle={toggle}
            />
          )}
        />
      ) : null}
    </div>
  );
}

interface ICompareRowProps {
  row: CompareRow;
  index: number;
  count: number;
  style: React.CSSProperties;
  trans: TranslationBundle;
  onToggle: (key: string) => void;
}

const CHANGE_MARK = { added: '+', removed: '−', changed: '~' } as const;

function CompareRowView(props: ICompareRowProps): JSX.Element {
  const { row, style, trans, onToggle } = props;
  const common = {
    role: 'listitem',
    'aria-posinset': props.index + 1,
    'aria-setsize': props.count,
    style,
    'data-key': row.key
  };
  switch (row.kind) {
    case 'section':
      return (
        <div
          {...common}
          className={`jp-DittoCompare-row jp-DittoCompare-section jp-mod-${row.section}`}
        >
          <span className="jp-DittoCompare-sectionTitle">{row.title}</span>
          <span className="jp-DittoCompare-counts">{row.counts}</span>
        </div>
      );
    case 'variable': {
      const changeLabel = changeText(row.change, trans);
      return (
        <div
          {...common}
          className={`jp-DittoCompare-row jp-DittoCompare-variable jp-mod-${row.change}`}
          aria-label={[
            trans.__('variable %1 %2', row.name, changeLabel),
            row.old !== null ? trans.__('was %1', row.old) : null,
            row.new !== null ? trans.__('now %1', row.new) : null,
            row.note
          ]
            .filter(Boolean)
            .join(', ')}
        >
          <span className="jp-DittoCompare-mark" aria-hidden="true">
            {CHANGE_MARK[row.change]}
          </span>
          <code className="jp-DittoCompare-name">{row.name}</code>
          <span className="jp-DittoCompare-type" title={row.type}>
            {row.type}
          </span>
          <span className="jp-DittoCompare-summary" title={summaryTitle(row.old, row.new)}>
            {row.old !== null ? <span className="jp-DittoCompare-old">{row.old}</span> : null}
            {row.old !== null && row.new !== null ? ' → ' : null}
            {row.new !== null ? <span className="jp-DittoCompare-new">{row.new}</span> : null}
          </span>
          {row.note ? <span className="jp-DittoCompare-note">{row.note}</span> : null}
        </div>
      );
    }
    case 'file':
    case 'cell': {
      const name = row.kind === 'file' ? row.path : `${row.label} (${row.cellType})`;
      const label =
        row.kind === 'file'
          ? trans.__('file %1, %2', row.path, changeText(row.change, trans))
          : trans.__('%1, %2', row.label, changeText(row.change, trans));
      const content = (
        <>
          {row.expandable ? (
            row.expanded ? (
              <caretDownIcon.react tag="span" className="jp-DittoCompare-caret" />
            ) : (
              <caretRightIcon.react tag="span" className="jp-DittoCompare-caret" />
            )
          ) : (
            <span className="jp-DittoCompare-caret" />
          )}
          <span className="jp-DittoCompare-mark" aria-hidden="true">
            {CHANGE_MARK[row.change]}
          </span>
          <span className="jp-DittoCompare-name jp-DittoMono" title={name}>
            {name}
          </span>
          {row.kind === 'file' ? (
            <span className="jp-DittoCompare-size">{row.sizes}</span>
          ) : (
            <>
              <code className="jp-DittoCompare-preview" title={row.preview}>
                {row.preview}
              </code>
              {row.outputsChanged ? (
                <span className="jp-DittoBadge">{trans.__('outputs changed')}</span>
              ) : null}
            </>
          )}
        </>
      );
      const className = `jp-DittoCompare-row jp-DittoCompare-${row.kind} jp-mod-${row.change}`;
      return row.expandable ? (
        <div {...common} className={className}>
          <button
            className="jp-DittoCompare-toggle"
            aria-expanded={row.expanded}
            aria-label={label}
            onClick={() => onToggle(row.key)}
          >
            {content}
          </button>
        </div>
      ) : (
        <div {...common} className={className} aria-label={label}>
          {content}
        </div>
      );
    }
    case 'line':
      return (
        <div {...common} className={`jp-DittoCompare-row jp-DittoCompare-line jp-mod-${row.tone}`}>
          <code>{row.text}</code>
        </div>
      );
    case 'note':
      return (
        <div {...common} className="jp-DittoCompare-row jp-DittoCompare-note">
          {row.text}
        </div>
      );
  }
}

function changeText(change: 'added' | 'removed' | 'changed', trans: TranslationBundle): string {
  switch (change) {
    case 'added':
      return trans.__('added');
    case 'removed':
      return trans.__('removed');
    default:
      return trans.__('changed');
  }
}

function summaryTitle(old: string | null, now: string | null): string {
  return [old, now].filter(part => part !== null).join(' → ');
}
