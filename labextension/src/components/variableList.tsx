/**
 * A checkpoint's variables in its details, windowed: name, type, summary, size, and
 * whether each could be kept.
 */

import { TranslationBundle } from '@jupyterlab/translation';
import * as React from 'react';

import { IVariable } from '../apiTypes';
import { formatBytes } from '../format';
import { VirtualList } from './virtualList';

/** Height of a variable's row in the details, in pixels. */
const VARIABLE_ROW_HEIGHT = 22;

/** Variable rows shown before the list scrolls. */
const VISIBLE_VARIABLES = 8;

/** The variables of a checkpoint. */
export function VariableList(props: {
  variables: IVariable[];
  trans: TranslationBundle;
}): JSX.Element {
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
