mod context_update;
