/**
 * One runtime's checkpoint tree: a virtualised list of rows, each with its graph cell.
 *
 * Only the rows in view are in the DOM (plus a margin), so a runtime with thousands of
 * checkpoints scrolls like one with ten; the next page loads when the end comes near.
 * Keyboard: the tree takes focus; arrows, Home, End, PageUp and PageDown move the
 * selection, Space picks the selected checkpoint for Compare (as Ctrl+click or Cmd+click
 * does), the context-menu key opens the checkpoint's actions. Under a checkpoint a fan-out
 * started from, its group ("4 branches") opens to each child (fanoutGroupRow.tsx,
 * branchRow.tsx).
 */

import { TranslationBundle } from '@jupyterlab/translation';
import { CommandRegistry } from '@lumino/commands';
import * as React from 'react';

import { ICheckpointSummary } from '../apiTypes';
import { fanoutGroups } from '../branches/fanout';
import { baseName, checkpointLabel, formatAge, formatBytes } from '../format';
import { PanelState } from '../state/panelState';
import { GraphCell } from '../tree/graph';
import { PassCell } from '../tree/passCell';
import { treeItems } from '../tree/treeItems';
import { nearEnd, scrollToShow, visibleRows } from '../tree/window';
import { pickLetter } from '../compare/comparePicks';
import { BranchRow } from './branchRow';
import { FanoutGroupRow } from './fanoutGroupRow';

/** Height of one row, in pixels (the graph cells join up at this height). */
export const ROW_HEIGHT = 26;

/** Rows shown before the tree scrolls. */
const VISIBLE_ROWS = 14;

/** The DOM id of a checkpoint's row. */
export function rowDomId(checkpointId: string): string {
  return `ditto-checkpoint-${checkpointId}`;
}

/** Props of `CheckpointTree`. */
export interface ICheckpointTreeProps {
  state: PanelState;
  runtimeId: string;
  commands: CommandRegistry;
  trans: TranslationBundle;
  now: number;
}

/** The tree of one runtime. */
export function CheckpointTree(props: ICheckpointTreeProps): JSX.Element {
  const { state, runtimeId, commands, trans, now } = props;
  const runtime = state.runtime(runtimeId);
  const tree = state.cache.tree(runtimeId);
  const lineage = state.cache.lineage(runtimeId);
  const layout = state.layout(runtimeId);
  const rows = layout.rows;
  const headId = lineage?.head?.checkpoint_id ?? null;
  const selection = state.selection;
  const selectedId = selection?.runtimeId === runtimeId ? selection.checkpointId : null;
  const selectedIndex = selectedId !== null ? (layout.index.get(selectedId) ?? -1) : -1;
  const groups = fanoutGroups(lineage?.checkouts ?? []);
  const { items, index: itemIndex } = treeItems(
    layout,
    checkpointId => groups.filter(group => group.checkpointId === checkpointId),
    fanoutId => state.isGroupExpanded(fanoutId)
  );
  const selectedItem = selectedId !== null ? (itemIndex.get(selectedId) ?? -1) : -1;

  const scroller = React.useRef<HTMLDivElement>(null);
  const [scrollTop, setScrollTop] = React.useState(0);
  const viewport = Math.min(items.length, VISIBLE_ROWS) * ROW_HEIGHT;
  const range = visibleRows(scrollTop, viewport, ROW_HEIGHT, items.length);

  React.useEffect(() => {
    // Keep the selected row in view when the keyboard moves it.
    const node = scroller.current;
    if (node && selectedItem >= 0) {
      const target = scrollToShow(selectedItem, node.scrollTop, viewport, ROW_HEIGHT);
      if (target !== null) {
        node.scrollTop = target;
      }
    }
  }, [selectedItem, viewport]);

  const onScroll = (event: React.UIEvent<HTMLDivElement>): void => {
    const top = event.currentTarget.scrollTop;
    setScrollTop(top);
    if (tree?.nextCursor && nearEnd(top, viewport, ROW_HEIGHT, items.length)) {
      void state.cache.loadMore(runtimeId);
    }
  };

  const select = (index: number): void => {
    const row = rows[Math.max(0, Math.min(rows.length - 1, index))];
    if (row) {
      state.select({ runtimeId, checkpointId: row.id });
    }
  };

  const onKeyDown = (event: React.KeyboardEvent<HTMLDivElement>): void => {
    const page = Math.max(1, Math.floor(viewport / ROW_HEIGHT) - 1);
    const moves: Record<string, number> = {
      ArrowDown: selectedIndex + 1,
      ArrowUp: selectedIndex < 0 ? 0 : selectedIndex - 1,
      Home: 0,
      End: rows.length - 1,
      PageDown: selectedIndex + page,
      PageUp: selectedIndex - page
    };
    if (event.key in moves) {
      event.preventDefault();
      select(moves[event.key]);
    } else if (event.key === ' ' && selectedId) {
      event.preventDefault();
      state.togglePick(runtimeId, selectedId);
    }
  };

  const source = lineage?.source ?? null;
  const sourceRuntime = source ? state.runtime(source.runtime_id) : undefined;
  const label = trans.__('Checkpoints of %1', baseName(runtime?.conversation_id ?? runtimeId));

  return (
    <div className="jp-DittoTreeBox">
      {source ? (
        <div className="jp-DittoTree-origin">
          {trans.__(
            'Checked out from %1 at %2',
            baseName(sourceRuntime?.conversation_id ?? source.runtime_id),
            checkpointLabel(
              state.cache.checkpoint(source.checkpoint_id) ?? {
                name: null,
                checkpoint_id: source.checkpoint_id
              }
            )
          )}
          {headId === source.checkpoint_id ? (
            <span className="jp-DittoBadge jp-mod-head">{trans.__('head')}</span>
          ) : null}
        </div>
      ) : null}
      {rows.length === 0 ? (
        <div className="jp-DittoTree-empty">
          {tree?.loading
            ? trans.__('Loading checkpoints…')
            : tree?.error
              ? tree.error
              : trans.__('No checkpoints yet.')}
        </div>
      ) : (
        <div
          ref={scroller}
          className="jp-DittoTree"
          role="tree"
          aria-label={label}
          aria-activedescendant={selectedId ? rowDomId(selectedId) : undefined}
          tabIndex={0}
          style={{ height: viewport }}
          onScroll={onScroll}
          onKeyDown={onKeyDown}
          onContextMenu={event => {
            // The context-menu key on the focused tree: the menu of the selected row.
            if (event.target === event.currentTarget && selectedId) {
              state.setMenuTarget({ runtimeId, checkpointId: selectedId });
            }
          }}
          onFocus={() => {
            if (selectedIndex < 0) {
              select(0);
            }
          }}
        >
          <div className="jp-DittoTree-canvas" style={{ height: items.length * ROW_HEIGHT }}>
            {items.slice(range.start, range.end).map((item, offset) => {
              const index = range.start + offset;
              const row = item.row;
              if (item.kind !== 'checkpoint') {
                const graph = <PassCell row={row} columns={layout.columns} height={ROW_HEIGHT} />;
                return item.kind === 'group' ? (
                  <FanoutGroupRow
                    key={item.key}
                    group={item.group}
                    graph={graph}
                    index={index}
                    count={items.length}
                    top={index * ROW_HEIGHT}
                    height={ROW_HEIGHT}
                    expanded={item.expanded}
                    commands={commands}
                    trans={trans}
                    onToggle={() => state.toggleGroup(item.group.id)}
                  />
                ) : (
                  <BranchRow
                    key={item.key}
                    branch={item.branch}
                    status={state.runtime(item.branch.runtime_id)?.status ?? item.branch.status}
                    graph={graph}
                    index={index}
                    count={items.length}
                    top={index * ROW_HEIGHT}
                    height={ROW_HEIGHT}
                    commands={commands}
                    trans={trans}
                  />
                );
              }
              const checkpoint = tree?.checkpoints.get(row.id);
              if (!checkpoint) {
                return null;
              }
              return (
                <CheckpointRow
                  key={row.id}
                  checkpoint={checkpoint}
                  graph={
                    <GraphCell
                      row={row}
                      columns={layout.columns}
                      height={ROW_HEIGHT}
                      head={row.id === headId}
                      branched={state.cache.checkoutsOf(runtimeId, row.id).length > 0}
                    />
                  }
                  index={index}
                  count={items.length}
                  head={row.id === headId}
                  selected={row.id === selectedId}
                  pick={state.pickIndex(runtimeId, row.id)}
                  checkouts={state.cache.checkoutsOf(runtimeId, row.id).length}
                  fromOrigin={
                    source !== null && checkpoint.parent_checkpoint_id === source.checkpoint_id
                  }
                  trans={trans}
                  now={now}
                  onSelect={event => {
                    if (event.ctrlKey || event.metaKey) {
                      state.ctrlPick(runtimeId, row.id);
                    }
                    state.select({ runtimeId, checkpointId: row.id });
                  }}
                  onMenu={() => {
                    state.select({ runtimeId, checkpointId: row.id });
                    state.setMenuTarget({ runtimeId, checkpointId: row.id });
                  }}
                />
              );
            })}
          </div>
        </div>
      )}
      {tree?.nextCursor ? (
        <button
          className="jp-DittoTree-more jp-mod-styled"
          aria-label={trans.__('Load older checkpoints')}
          disabled={tree.loading}
          onClick={() => void state.cache.loadMore(runtimeId)}
        >
          {tree.loading ? trans.__('Loading…') : trans.__('Load older checkpoints')}
        </button>
      ) : null}
    </div>
  );
}

interface ICheckpointRowProps {
  checkpoint: ICheckpointSummary;
  graph: JSX.Element;
  index: number;
  count: number;
  head: boolean;
  selected: boolean;
  /** Its place among the checkpoints picked for Compare (1 to 8), or 0. */
  pick: number;
  checkouts: number;
  fromOrigin: boolean;
  trans: TranslationBundle;
  now: number;
  onSelect: (event: React.MouseEvent) => void;
  onMenu: () => void;
}

function CheckpointRow(props: ICheckpointRowProps): JSX.Element {
  const { checkpoint, index, head, selected, pick, checkouts, trans, now } = props;
  const label = checkpointLabel(checkpoint);
  const lost = checkpoint.unrestorable.length;
  const age = formatAge(checkpoint.created_at_ms, now, (m, ...a) => trans.__(m, ...a));
  const parts = [label, age, formatBytes(checkpoint.bytes_written)];
  if (head) {
    parts.push(trans.__('head'));
  }
  if (checkouts > 0) {
    parts.push(trans._n('%1 checkout', '%1 checkouts', checkouts));
  }
  if (lost > 0) {
    parts.push(trans._n('%1 value not kept', '%1 values not kept', lost));
  }
  if (pick > 0) {
    parts.push(trans.__('picked for compare (%1)', pick));
  }
  return (
    <div
      id={rowDomId(checkpoint.checkpoint_id)}
      role="treeitem"
      aria-level={1}
      aria-posinset={index + 1}
      aria-setsize={props.count}
      aria-selected={selected}
      aria-label={parts.join(', ')}
      className={`jp-DittoCheckpoint${selected ? ' jp-mod-selected' : ''}${head ? ' jp-mod-head' : ''}${pick > 0 ? ' jp-mod-picked' : ''}`}
      data-checkpoint-id={checkpoint.checkpoint_id}
      data-runtime-id={checkpoint.runtime_id}
      style={{ top: index * ROW_HEIGHT, height: ROW_HEIGHT }}
      onClick={props.onSelect}
      onContextMenu={props.onMenu}
    >
      {props.graph}
      <span
        className={`jp-DittoCheckpoint-name${checkpoint.name ? '' : ' jp-mod-id'}`}
        title={checkpoint.checkpoint_id}
      >
        {label}
      </span>
      {head ? <span className="jp-DittoBadge jp-mod-head">{trans.__('head')}</span> : null}
      {pick > 0 ? (
        <span
          className="jp-DittoBadge jp-mod-pick"
          title={trans.__('Picked for compare (%1)', pick)}
        >
          {pickLetter(pick)}
        </span>
      ) : null}
      {props.fromOrigin ? (
        <span className="jp-DittoBadge" title={trans.__('Its parent is in the source runtime')}>
          {trans.__('branch')}
        </span>
      ) : null}
      {checkouts > 0 ? (
        <span
          className="jp-DittoBadge jp-mod-branch"
          title={trans._n('%1 checkout from here', '%1 checkouts from here', checkouts)}
        >
          {`⎇ ${checkouts}`}
        </span>
      ) : null}
      {lost > 0 ? (
        <span
          className="jp-DittoBadge jp-mod-warn"
          title={checkpoint.unrestorable.map(v => `${v.name} (${v.type})`).join(', ')}
        >
          {`⚠ ${lost}`}
        </span>
      ) : null}
      {checkpoint.has_provider_snapshot ? null : (
        <span className="jp-DittoBadge jp-mod-muted" title={trans.__('Snapshot deleted')}>
          {trans.__('no snapshot')}
        </span>
      )}
      <span
        className="jp-DittoCheckpoint-meta"
        title={new Date(checkpoint.created_at_ms).toLocaleString()}
      >
        {`${formatBytes(checkpoint.bytes_written)} · ${age}`}
      </span>
    </div>
  );
}
