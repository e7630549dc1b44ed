"""The rollout reconciler (`reconciler`): putting tables on servers (rollout, rollback,
Live, the holders of mounted tables)."""
