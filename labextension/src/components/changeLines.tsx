/**
 * One kind of change (variables or files) in a checkpoint's Changes section: the first
 * few, then "and N more".
 */

import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

/** Items of each kind the Changes section names before "and N more". */
const CHANGES_SHOWN = 5;

/** The changes of one kind, in short. */
export function ChangeLines(props: {
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
