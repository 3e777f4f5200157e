/**
 * Registers the notebook widgets' views (`CheckpointTree`) with ipywidgets' widget manager,
 * when JupyterLab has one (jupyterlab_widgets); without it the kernel's text/plain shows.
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { IJupyterWidgetRegistry } from '@jupyter-widgets/base';

import {
  CheckpointTreeModel,
  CheckpointTreeView,
  MODULE_NAME,
  MODULE_VERSION
} from './checkpointTreeView';

export const widgetsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'ditto-jupyter:widgets',
  description: 'The CheckpointTree notebook widget, drawn with the side panel tree.',
  autoStart: true,
  optional: [IJupyterWidgetRegistry],
  activate: (_app: JupyterFrontEnd, registry: IJupyterWidgetRegistry | null) => {
    registry?.registerWidget({
      name: MODULE_NAME,
      version: MODULE_VERSION,
      exports: { CheckpointTreeModel, CheckpointTreeView }
    });
  }
};
