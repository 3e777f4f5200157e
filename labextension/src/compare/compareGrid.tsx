/**
 * The side-by-side view of a comparison of many sides (the branches of a fan-out): one
 * column per side, a row per variable, file and cell, the rows whose sides differ marked;
 * a filter and "only rows that differ". A windowed list, as the two-sided view is.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { ICompareResult } from '../apiTypes';

import { VirtualList } from '../components/virtualList';
import { GridRow, gridRows } from './gridRows';

/** Height of one row of the side-by-side view, in pixels. */
export const GRID_ROW_HEIGHT = 24;

/** Props of `CompareGrid`. */
export interface ICompareGridProps {
  title: string;
  result: ICompareResult;
  trans: TranslationBundle;
}

/** The side-by-side comparison. */
export function CompareGrid(props: ICompareGridProps): JSX.Element {
  const { title, result, trans } = props;
  const [filter, setFilter] = React.useState('');
  const [onlyDiffering, setOnlyDiffering] = React.useState(false);
  const t = React.useCallback((m: string, ...a: (string | number)[]) => trans.__(m, ...a), [trans]);
  const rows = React.useMemo(
    () => gridRows(result, { filter, onlyDiffering, t }),
    [result, filter, onlyDiffering, t]
  );
  const columns = `minmax(8em, 1.2fr) repeat(${result.sides.length}, minmax(6em, 1fr))`;
  return (
    <div className="jp-DittoCompare-body jp-DittoGrid">
      <div className="jp-DittoCompare-header">
        <h2 className="jp-DittoCompare-title">{title}</h2>
        <div className="jp-DittoCompare-tools">
          <input
            className="jp-DittoCompare-filter jp-mod-styled"
            type="search"
            placeholder={trans.__('Filter by name or path')}
            aria-label={trans.__('Filter the rows')}
            value={filter}
            onChange={event => setFilter(event.currentTarget.value)}
          />
          <label className="jp-DittoGrid-only">
            <input
              type="checkbox"
              checked={onlyDiffering}
              onChange={event => setOnlyDiffering(event.currentTarget.checked)}
            />
            {trans.__('Only rows that differ')}
          </label>
        </div>
        <div
          className="jp-DittoGrid-row jp-DittoGrid-sides"
          role="row"
          style={{ gridTemplateColumns: columns }}
        >
          <span className="jp-DittoGrid-name" />
          {result.sides.map((side, i) => (
            <span
              key={i}
              className="jp-DittoGrid-side"
              role="columnheader"
              title={side.checkpoint_id ?? trans.__('live')}
            >
              {side.label}
            </span>
          ))}
        </div>
      </div>
      <VirtualList
        className="jp-DittoCompare-list"
        role="list"
        ariaLabel={trans.__('%1 sides side by side', result.sides.length)}
        count={rows.length}
        rowHeight={GRID_ROW_HEIGHT}
        renderRow={(index, style) => (
          <GridRowView
            key={rows[index].key}
            row={rows[index]}
            columns={columns}
            style={style}
            trans={trans}
          />
        )}
      />
    </div>
  );
}

interface IGridRowViewProps {
  row: GridRow;
  columns: string;
  style: React.CSSProperties;
  trans: TranslationBundle;
}

function GridRowView(props: IGridRowViewProps): JSX.Element {
  const { row, style, trans } = props;
  switch (row.kind) {
    case 'section':
      return (
        <div
          role="listitem"
          style={style}
          data-key={row.key}
          className={`jp-DittoCompare-row jp-DittoCompare-section jp-mod-${row.section}`}
        >
          <span className="jp-DittoCompare-sectionTitle">{row.title}</span>
          <span className="jp-DittoCompare-counts">{row.counts}</span>
        </div>
      );
    case 'note':
      return (
        <div role="listitem" style={style} className="jp-DittoCompare-row jp-DittoCompare-note">
          {row.text}
        </div>
      );
    case 'item':
      return (
        <div
          role="listitem"
          style={{ ...style, gridTemplateColumns: props.columns }}
          data-key={row.key}
          className={`jp-DittoCompare-row jp-DittoGrid-row jp-DittoGrid-${row.section}${row.same ? '' : ' jp-mod-differs'}`}
          aria-label={[
            row.name,
            row.same ? trans.__('the same on every side') : trans.__('differs'),
            ...row.values.map(v => v ?? trans.__('absent'))
          ].join(', ')}
        >
          <span className="jp-DittoGrid-name jp-DittoMono" title={row.name}>
            <span className="jp-DittoGrid-mark" aria-hidden="true">
              {row.same ? '' : '≠'}
            </span>
            {row.name}
          </span>
          {row.values.map((value, i) => (
            <span
              key={i}
              className={`jp-DittoGrid-value${value === null ? ' jp-mod-absent' : ''}`}
              title={row.titles[i]}
            >
              {value ?? '—'}
            </span>
          ))}
        </div>
      );
  }
}
