"""Operations on whole runs, above the storage and the catalog: the tiers (migrate, stage, purge)."""
