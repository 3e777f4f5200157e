/**
 * The body of the "Keep this branch?" dialog: which siblings close, and that their
 * checkpoints stay.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

/** Props of `KeepDialogBody`. */
export interface IKeepDialogBodyProps {
  /** The kept branch's name. */
  kept: string;
  /** The names of the siblings that will be closed. */
  closing: string[];
  trans: TranslationBundle;
}

/** What keeping a branch does, named. */
export function KeepDialogBody(props: IKeepDialogBodyProps): JSX.Element {
  const { kept, closing, trans } = props;
  return (
    <div className="jp-DittoKeepDialog">
      <p>
        {trans._n(
          'Keeping %2 closes the other branch of its fan-out:',
          'Keeping %2 closes the %1 other branches of its fan-out:',
          closing.length,
          kept
        )}
      </p>
      <ul className="jp-DittoKeepDialog-list">
        {closing.map(name => (
          <li key={name} className="jp-DittoKeepDialog-sibling">
            {name}
          </li>
        ))}
      </ul>
      <p>
        {trans.__(
          'Their kernels stop and their workspaces are released. Their checkpoints stay, under the retention rules; check one out to continue from it.'
        )}
      </p>
    </div>
  );
}
