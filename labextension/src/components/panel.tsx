/**
 * The "Runtimes" side panel: every runtime with its status, notebook and last change, the
 * one of the notebook in focus pinned on top; each opens into its checkpoint tree, with
 * the checkpoints picked for Compare above it and, after a restore whose checkpoint's
 * cells differ from the notebook's, a notice offering to show or bring them back.
 */

import { ReactWidget, UseSignal } from '@jupyterlab/apputils';
import { TranslationBundle } from '@jupyterlab/translation';
import { caretDownIcon, caretRightIcon, refreshIcon } from '@jupyterlab/ui-components';
import { CommandRegistry } from '@lumino/commands';
import { Message } from '@lumino/messaging';
import * as React from 'react';

import { IRuntimeRecord, LIVE } from '../apiTypes';
import { CommandIDs } from '../commandIds';
import { baseName, checkpointLabel, formatAge, shortId } from '../format';
import { runtimesIcon } from '../icons';
import { restoreNoticeText } from '../restoreNoticeText';
import { PanelState } from '../state/panelState';
import { scrollToReveal } from '../tree/window';
import { CheckpointDetails } from './details';
import { CheckpointTree } from './tree';

/** How often ages ("5 min ago") are redrawn, in ms. */
const CLOCK_TICK_MS = 30_000;

/** The side panel widget. */
export class RuntimesPanel extends ReactWidget {
  constructor(
    readonly state: PanelState,
    readonly commands: CommandRegistry,
    readonly trans: TranslationBundle
  ) {
    super();
    this.id = 'ditto-runtimes-panel';
    this.addClass('jp-DittoPanel');
    this.title.icon = runtimesIcon;
    this.title.caption = trans.__('Runtimes');
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', trans.__('Runtimes'));
  }

  /**
   * Load the runtime list the first time the panel is on screen. Watched in the DOM:
   * JupyterLab's sidebar shows a panel while its container is still hidden, so Lumino's
   * after-show message does not always reach it.
   */
  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    if (this.state.active || typeof IntersectionObserver === 'undefined') {
      void this.state.activate();
      return;
    }
    this._visibility = new IntersectionObserver(entries => {
      if (entries.some(entry => entry.isIntersecting)) {
        this._visibility?.disconnect();
        this._visibility = null;
        void this.state.activate();
      }
    });
    this._visibility.observe(this.node);
  }

  protected onBeforeDetach(msg: Message): void {
    this._visibility?.disconnect();
    this._visibility = null;
    super.onBeforeDetach(msg);
  }

  private _visibility: IntersectionObserver | null = null;

  render(): JSX.Element {
    return (
      <UseSignal signal={this.state.changed}>
        {() => <RuntimesView state={this.state} commands={this.commands} trans={this.trans} />}
      </UseSignal>
    );
  }
}

interface IViewProps {
  state: PanelState;
  commands: CommandRegistry;
  trans: TranslationBundle;
}

/**
 * The time the ages are shown at: it ticks every CLOCK_TICK_MS, and a render for any other
 * reason (a new checkpoint) reads the clock again so nothing shows younger than it is.
 */
function useClock(): number {
  const [now, setNow] = React.useState(() => Date.now());
  React.useEffect(() => {
    const timer = window.setInterval(() => setNow(Date.now()), CLOCK_TICK_MS);
    return () => window.clearInterval(timer);
  }, []);
  // eslint-disable-next-line react-hooks/purity -- reading the clock is this hook's job
  return Math.max(now, Date.now());
}

/**
 * When another notebook takes focus, scroll its runtime ("this notebook", pinned on top)
 * into view: its header and status line, in the panel's scrolled node.
 */
function useRevealPinned(body: React.RefObject<HTMLDivElement>, pinnedId: string | null): void {
  React.useEffect(() => {
    const scroller = body.current?.closest<HTMLElement>('.jp-DittoPanel');
    const item = body.current?.querySelector<HTMLElement>('.jp-DittoRuntime.jp-mod-pinned');
    if (!pinnedId || !scroller || !item || scroller.clientHeight === 0) {
      return;
    }
    const sub = item.querySelector<HTMLElement>('.jp-DittoRuntime-sub') ?? item;
    const top = item.getBoundingClientRect().top - scroller.getBoundingClientRect().top;
    const height = sub.getBoundingClientRect().bottom - item.getBoundingClientRect().top;
    const target = scrollToReveal(
      top + scroller.scrollTop,
      height,
      scroller.scrollTop,
      scroller.clientHeight
    );
    if (target !== null) {
      scroller.scrollTop = target;
    }
  }, [body, pinnedId]);
}

function RuntimesView(props: IViewProps): JSX.Element {
  const { state, commands, trans } = props;
  const now = useClock();
  const runtimes = state.runtimes();
  const body = React.useRef<HTMLDivElement>(null);
  useRevealPinned(body, state.pinnedId);
  return (
    <div className="jp-DittoPanel-body" ref={body}>
      <div className="jp-DittoPanel-header">
        <h2 className="jp-DittoPanel-title">{trans.__('Runtimes')}</h2>
        <button
          className="jp-DittoIconButton"
          title={trans.__('Refresh')}
          aria-label={trans.__('Refresh the runtimes')}
          onClick={() => void commands.execute(CommandIDs.refresh)}
        >
          <refreshIcon.react tag="span" />
        </button>
      </div>
      {state.cache.error ? (
        <div className="jp-DittoPanel-error" role="alert">
          {state.cache.error}
        </div>
      ) : null}
      {state.cache.loaded && runtimes.length === 0 && !state.cache.error ? (
        <div className="jp-DittoPanel-empty">
          {trans.__('No runtimes yet. Open a notebook to start one.')}
        </div>
      ) : null}
      <ul className="jp-DittoRuntimes" aria-label={trans.__('Runtimes')}>
        {runtimes.map(runtime => (
          <RuntimeItem
            key={runtime.runtime_id}
            runtime={runtime}
            pinned={runtime.runtime_id === state.pinnedId}
            now={now}
            {...props}
          />
        ))}
      </ul>
    </div>
  );
}

interface IRuntimeItemProps extends IViewProps {
  runtime: IRuntimeRecord;
  pinned: boolean;
  now: number;
}

function RuntimeItem(props: IRuntimeItemProps): JSX.Element {
  const { state, commands, trans, runtime, pinned, now } = props;
  const id = runtime.runtime_id;
  const expanded = state.isExpanded(id);
  const pending = state.pending(id);
  const name = baseName(runtime.conversation_id);
  const selection = state.selection;
  const treeId = `ditto-tree-${id}`;
  const args = { runtimeId: id };
  const action = (command: string, label: string): JSX.Element | null =>
    commands.isEnabled(command, args) ? (
      <button
        className="jp-DittoButton jp-mod-styled"
        aria-label={`${label} ${name}`}
        title={commands.caption(command, args) || label}
        disabled={pending !== undefined}
        onClick={() => void commands.execute(command, args)}
      >
        {label}
      </button>
    ) : null;
  return (
    <li
      className={`jp-DittoRuntime${pinned ? ' jp-mod-pinned' : ''}`}
      data-runtime-id={id}
      aria-label={trans.__('%1, %2', name, runtime.status)}
    >
      <div
        className="jp-DittoRuntime-header"
        onContextMenu={() => state.setMenuTarget({ runtimeId: id, checkpointId: null })}
      >
        <button
          className="jp-DittoIconButton jp-DittoRuntime-toggle"
          aria-expanded={expanded}
          aria-controls={treeId}
          aria-label={
            expanded
              ? trans.__('Hide the checkpoints of %1', name)
              : trans.__('Show the checkpoints of %1', name)
          }
          onClick={() => state.toggle(id)}
        >
          {expanded ? <caretDownIcon.react tag="span" /> : <caretRightIcon.react tag="span" />}
        </button>
        <span
          className={`jp-DittoStatusDot jp-mod-${runtime.status}`}
          role="img"
          aria-label={trans.__('status: %1', runtime.status)}
        />
        <span className="jp-DittoRuntime-name" title={runtime.conversation_id}>
          {name}
        </span>
        <span
          className="jp-DittoRuntime-age"
          title={trans.__('Last change: %1', new Date(runtime.updated_at_ms).toLocaleString())}
        >
          {formatAge(runtime.updated_at_ms, now, (m, ...a) => trans.__(m, ...a))}
        </span>
      </div>
      <div className="jp-DittoRuntime-sub">
        <span className={`jp-DittoStatusText jp-mod-${runtime.status}`}>{runtime.status}</span>
        {pinned ? (
          <span className="jp-DittoBadge jp-mod-pinned">{trans.__('this notebook')}</span>
        ) : null}
        <span className="jp-DittoRuntime-actions">
          {action(CommandIDs.checkpoint, trans.__('Checkpoint'))}
          {action(CommandIDs.pause, trans.__('Pause'))}
          {action(CommandIDs.resume, trans.__('Resume'))}
          {action(CommandIDs.close, trans.__('Close'))}
        </span>
      </div>
      {pending ? (
        <div className="jp-DittoProgress" role="progressbar" aria-label={pending}>
          <div className="jp-DittoProgress-bar" />
          <span className="jp-DittoProgress-label">{pending}</span>
        </div>
      ) : null}
      <RestoreNotice {...props} />
      {expanded ? (
        <div id={treeId}>
          <ComparePicks {...props} />
          <CheckpointTree state={state} runtimeId={id} trans={trans} now={now} />
          {selection && selection.runtimeId === id ? (
            <CheckpointDetails
              state={state}
              runtimeId={id}
              checkpointId={selection.checkpointId}
              commands={commands}
              trans={trans}
            />
          ) : null}
        </div>
      ) : null}
    </li>
  );
}

/** The label of a checkpoint the cache may not hold. */
function labelOf(state: PanelState, checkpointId: string): string {
  const known = state.cache.checkpoint(checkpointId);
  return known ? checkpointLabel(known) : shortId(checkpointId);
}

/** After a restore: how many cells differ, and the two actions. */
function RestoreNotice(props: IRuntimeItemProps): JSX.Element | null {
  const { state, commands, trans, runtime } = props;
  const id = runtime.runtime_id;
  const notice = state.restoreNotice(id);
  if (!notice) {
    return null;
  }
  const args = { runtimeId: id, checkpointId: notice.checkpointId };
  const label = labelOf(state, notice.checkpointId);
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

/** The checkpoints picked for Compare in this runtime, and Compare. */
function ComparePicks(props: IRuntimeItemProps): JSX.Element | null {
  const { state, commands, trans, runtime } = props;
  const picks = state.picks;
  if (!picks || picks.runtimeId !== runtime.runtime_id) {
    return null;
  }
  const [a, b] = picks.checkpointIds;
  const live = runtime.status === 'idle' || runtime.status === 'busy';
  const compareArgs = b ? {} : { runtimeId: runtime.runtime_id, from: a, to: LIVE };
  const canCompare = b !== undefined || live;
  return (
    <div className="jp-DittoPicks" role="group" aria-label={trans.__('Picked for compare')}>
      <span className="jp-DittoPicks-text">
        <span className="jp-DittoBadge jp-mod-pick">A</span> {labelOf(state, a)}
        {b ? (
          <>
            {'  '}
            <span className="jp-DittoBadge jp-mod-pick">B</span> {labelOf(state, b)}
          </>
        ) : (
          <span className="jp-DittoPicks-hint">
            {' '}
            {trans.__('Ctrl+click a second checkpoint, or compare with live')}
          </span>
        )}
      </span>
      <span className="jp-DittoPicks-actions">
        <button
          className="jp-DittoButton jp-mod-styled jp-DittoButton-primary"
          aria-label={
            b
              ? trans.__('Compare %1 and %2', labelOf(state, a), labelOf(state, b))
              : trans.__('Compare %1 with live', labelOf(state, a))
          }
          disabled={!canCompare}
          onClick={() => void commands.execute(CommandIDs.compare, compareArgs)}
        >
          {b ? trans.__('Compare') : trans.__('Compare with live')}
        </button>
        <button
          className="jp-DittoButton jp-mod-styled"
          aria-label={trans.__('Clear the checkpoints picked for compare')}
          onClick={() => state.clearPicks()}
        >
          {trans.__('Clear')}
        </button>
      </span>
    </div>
  );
}
