//! Render owns its past output: what a render no longer produces is deleted (never a file
//! without the marker, never an entry the user added), also across a kill.
