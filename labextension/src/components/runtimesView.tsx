/**
 * The body of the "Runtimes" side panel: a header with Refresh, the load error or the
 * empty note, and every runtime (runtimeItem.tsx), the one of the notebook in focus
 * pinned on top and scrolled into view; ages redrawn every 30 s.
 */

import { refreshIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { CommandIDs } from '../commandIds';
import { scrollToReveal } from '../tree/window';
import { IViewProps } from './panelProps';
import { RuntimeItem } from './runtimeItem';

/** How often ages ("5 min ago") are redrawn, in ms. */
const CLOCK_TICK_MS = 30_000;

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

/** The list of runtimes. */
export function RuntimesView(props: IViewProps): JSX.Element {
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
