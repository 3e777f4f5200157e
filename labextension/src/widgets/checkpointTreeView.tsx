/**
 * The view of the `CheckpointTree` notebook widget (ditto_jupyter/widgets/checkpoint_tree.py):
 * the same tree as the side panel, drawn with `src/tree/` (layout, graph cells, windowing),
 * automatic checkpoints folded into timelines of cells. Clicking a checkpoint selects it;
 * its Restore and Check out buttons send `{action, checkpoint_id}` to the kernel, which
 * does the work and sends back the outcome line and the redrawn tree.
 */

import { DOMWidgetModel, DOMWidgetView, ISerializers } from '@jupyter-widgets/base';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import * as React from 'react';
import { createRoot, Root } from 'react-dom/client';

import { baseName, formatAge, shortId } from '../format';
import { GraphCell } from '../tree/graph';
import { layoutTree } from '../tree/layout';
import { visibleRows } from '../tree/window';
import {
  foldTimelines,
  ITimelineEntry,
  IWidgetBranch,
  IWidgetNode,
  timelineLabel
} from './timeline';

/** The npm package and version the kernel side names (`_view_module`). */
export const MODULE_NAME = 'ditto-jupyter';
export const MODULE_VERSION = '0.1.0';

/**
 * Ask before a restore, as the side panel does; `restore` runs once the user accepts.
 */
async function confirmRestore(label: string, restore: () => void): Promise<void> {
  const result = await showDialog({
    title: 'Restore checkpoint?',
    body:
      `The kernel's variables and the workspace files go back to those of ${label}. ` +
      'Files written since then are kept in a checkpoint named before-restore. ' +
      "The notebook's cells are not changed.",
    buttons: [Dialog.cancelButton({ label: 'Cancel' }), Dialog.warnButton({ label: 'Restore' })]
  });
  if (result.button.accept) {
    restore();
  }
}

/** Row height in pixels (the graph cells join up at this height). */
const ROW_HEIGHT = 26;
/** Rows shown before the tree scrolls. */
const VISIBLE_ROWS = 12;

/** The widget's model: the state the kernel syncs. */
export class CheckpointTreeModel extends DOMWidgetModel {
  defaults(): Backbone.ObjectHash {
    return {
      ...super.defaults(),
      _model_name: 'CheckpointTreeModel',
      _model_module: MODULE_NAME,
      _model_module_version: MODULE_VERSION,
      _view_name: 'CheckpointTreeView',
      _view_module: MODULE_NAME,
      _view_module_version: MODULE_VERSION,
      runtime_id: '',
      restorable: false,
      head_id: null,
      nodes: [],
      branches: [],
      message: '',
      message_is_error: false,
      busy: false
    };
  }

  static serializers: ISerializers = { ...DOMWidgetModel.serializers };
}

/** What the React tree reads from the model. */
interface ITreeState {
  runtimeId: string;
  restorable: boolean;
  headId: string | null;
  nodes: IWidgetNode[];
  branches: IWidgetBranch[];
  message: string;
  messageIsError: boolean;
  busy: boolean;
}

function readState(model: DOMWidgetModel): ITreeState {
  return {
    runtimeId: model.get('runtime_id') as string,
    restorable: model.get('restorable') as boolean,
    headId: model.get('head_id') as string | null,
    nodes: model.get('nodes') as IWidgetNode[],
    branches: model.get('branches') as IWidgetBranch[],
    message: model.get('message') as string,
    messageIsError: model.get('message_is_error') as boolean,
    busy: model.get('busy') as boolean
  };
}

interface ITreeProps {
  state: ITreeState;
  /** The time of this drawing, for the ages shown (read when the widget's state changes). */
  now: number;
  send: (action: 'restore' | 'checkout', checkpointId: string) => void;
}

/** The whole widget: header, tree rows, the selected checkpoint's actions, outcome line. */
function WidgetTree(props: ITreeProps): JSX.Element {
  const { state, send, now } = props;
  const [selected, setSelected] = React.useState<string | null>(null);
  const [scrollTop, setScrollTop] = React.useState(0);
  const ends = React.useMemo(
    () => new Set(state.branches.map(b => b.checkpoint_id)),
    [state.branches]
  );
  const entries = React.useMemo(() => foldTimelines(state.nodes, ends), [state.nodes, ends]);
  const byEntry = React.useMemo(() => new Map(entries.map(e => [e.id, e])), [entries]);
  const layout = React.useMemo(() => layoutTree(entries), [entries]);
  const byNode = React.useMemo(() => new Map(state.nodes.map(n => [n.id, n])), [state.nodes]);
  const conversations = new Map(state.branches.map(b => [b.runtime_id, b.conversation_id]));
  const rows = layout.rows;
  const viewport = Math.min(rows.length, VISIBLE_ROWS) * ROW_HEIGHT;
  const range = visibleRows(scrollTop, viewport, ROW_HEIGHT, rows.length);
  const own = state.nodes.filter(n => n.runtime_id === state.runtimeId);
  const chosen = selected !== null ? byNode.get(selected) : undefined;

  const nodeLabel = (node: IWidgetNode): string => {
    const count = node.auto?.execution_count;
    return node.name ?? (typeof count === 'number' ? `cell ${count}` : shortId(node.id));
  };

  const renderEntry = (entry: ITimelineEntry): JSX.Element => {
    const runtimeId = entry.nodes[0].runtime_id;
    const branchTag =
      runtimeId !== state.runtimeId ? (
        <span className="jp-DittoBadge jp-DittoTreeWidget-branch" title={runtimeId}>
          {baseName(conversations.get(runtimeId) ?? shortId(runtimeId))}
        </span>
      ) : null;
    if (entry.timeline) {
      return (
        <span className="jp-DittoTreeWidget-timeline">
          {branchTag}
          <span className="jp-DittoTreeWidget-ticks">
            {entry.nodes.map(node => (
              <button
                key={node.id}
                className={
                  'jp-DittoTreeWidget-tick' +
                  (node.auto?.failed ? ' jp-mod-failed' : '') +
                  (node.id === state.headId ? ' jp-mod-head' : '') +
                  (node.id === selected ? ' jp-mod-selected' : '')
                }
                title={`${nodeLabel(node)}${node.auto?.failed ? ' (failed)' : ''}\n${node.auto?.source ?? ''}`}
                aria-label={nodeLabel(node)}
                onClick={() => setSelected(node.id)}
              >
                {node.auto?.execution_count ?? '·'}
              </button>
            ))}
          </span>
          <span className="jp-DittoTreeWidget-meta">
            {timelineLabel(entry.nodes)} · {formatAge(entry.time, now)}
          </span>
        </span>
      );
    }
    const node = entry.nodes[0];
    return (
      <span
        className={'jp-DittoTreeWidget-label' + (node.id === selected ? ' jp-mod-selected' : '')}
        onClick={() => setSelected(node.id)}
      >
        {branchTag}
        <span className="jp-DittoTreeWidget-name">{nodeLabel(node)}</span>
        {node.id === state.headId ? <span className="jp-DittoBadge jp-mod-head">head</span> : null}
        <span className="jp-DittoTreeWidget-meta">
          {shortId(node.id)} · {formatAge(node.time, now)}
        </span>
      </span>
    );
  };

  return (
    <div className="jp-DittoTreeWidget">
      <div className="jp-DittoTreeWidget-header">
        Checkpoints of runtime <code>{shortId(state.runtimeId)}</code>: {own.length}
        {state.branches.length > 0 ? `, ${state.branches.length} branches` : ''}
      </div>
      {rows.length === 0 ? (
        <div className="jp-DittoTree-empty">No checkpoints yet.</div>
      ) : (
        <div
          className="jp-DittoTree"
          style={{ height: viewport }}
          onScroll={event => setScrollTop(event.currentTarget.scrollTop)}
        >
          <div className="jp-DittoTree-canvas" style={{ height: rows.length * ROW_HEIGHT }}>
            {rows.slice(range.start, range.end).map((row, offset) => {
              const entry = byEntry.get(row.id);
              if (entry === undefined) {
                return null;
              }
              const index = range.start + offset;
              const head = entry.nodes.some(n => n.id === state.headId);
              return (
                <div
                  key={row.id}
                  className="jp-DittoTreeWidget-row"
                  data-checkpoint-id={row.id}
                  style={{ top: index * ROW_HEIGHT, height: ROW_HEIGHT }}
                >
                  <GraphCell
                    row={row}
                    columns={layout.columns}
                    height={ROW_HEIGHT}
                    head={head}
                    branched={entry.nodes.some(n => ends.has(n.id))}
                  />
                  {renderEntry(entry)}
                </div>
              );
            })}
          </div>
        </div>
      )}
      {chosen !== undefined ? (
        <div className="jp-DittoTreeWidget-actions">
          <span className="jp-DittoTreeWidget-chosen">
            {nodeLabel(chosen)} <code>{shortId(chosen.id)}</code>
            {chosen.unrestorable.length > 0 ? ` (not kept: ${chosen.unrestorable.join(', ')})` : ''}
          </span>
          {state.restorable && chosen.runtime_id === state.runtimeId ? (
            <button
              className="jp-mod-styled jp-DittoTreeWidget-restore"
              disabled={state.busy}
              onClick={() =>
                void confirmRestore(nodeLabel(chosen), () => send('restore', chosen.id))
              }
            >
              Restore
            </button>
          ) : null}
          <button
            className="jp-mod-styled jp-DittoTreeWidget-checkout"
            disabled={state.busy}
            onClick={() => send('checkout', chosen.id)}
          >
            Check out
          </button>
        </div>
      ) : null}
      {state.message ? (
        <div
          className={'jp-DittoTreeWidget-message' + (state.messageIsError ? ' jp-mod-error' : '')}
          role="status"
        >
          {state.message}
        </div>
      ) : null}
    </div>
  );
}

/** The view: renders `WidgetTree` with React and redraws on every state change. */
export class CheckpointTreeView extends DOMWidgetView {
  private root: Root | null = null;

  render(): void {
    this.el.classList.add('jp-DittoTreeWidgetHost');
    this.root = createRoot(this.el);
    this.draw();
    this.listenTo(this.model, 'change', () => this.draw());
  }

  private draw(): void {
    this.root?.render(
      <WidgetTree
        state={readState(this.model)}
        now={Date.now()}
        send={(action, checkpointId) => this.send({ action, checkpoint_id: checkpointId })}
      />
    );
  }

  remove(): void {
    this.root?.unmount();
    this.root = null;
    super.remove();
  }
}
