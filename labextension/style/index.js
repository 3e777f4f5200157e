import './base.css';
import './widgets.css';
