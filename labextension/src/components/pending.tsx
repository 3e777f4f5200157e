/**
 * The part of a checkpoint's details section (what it holds, what changed) shown while
 * its answer loads, or when reading it failed (with Retry).
 */

import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { Loaded } from '../state/checkpointInfo';

/** Props of the details' sections that load from the server. */
export interface ISectionProps<T> {
  loaded: Loaded<T>;
  trans: TranslationBundle;
  /** Read it again (after a failure). */
  onRetry: () => void;
}

/** "Loading…", or the error with Retry; nothing once loaded. */
export function Pending<T>(props: ISectionProps<T>): JSX.Element | null {
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
